// table.cpp — rendering lab tables.
#include "lab/table.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include <fmt/core.h>

#include "io/json.hpp"
#include "sdpa/error.hpp"

namespace sdpa::lab {
namespace {

std::string text(const Cell& c) {
  if (const auto* d = std::get_if<double>(&c)) {
    if (std::isnan(*d)) return "nan";
    if (std::isinf(*d)) return *d > 0 ? "inf" : "-inf";
    return fmt::format("{:.6g}", *d);
  }
  if (const auto* i = std::get_if<std::int64_t>(&c)) return std::to_string(*i);
  return std::get<std::string>(c);
}

std::string csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

}  // namespace

Format parse_format(const std::string& s) {
  if (s == "table") return Format::table;
  if (s == "json") return Format::json;
  if (s == "csv") return Format::csv;
  throw Error("--format: expected table, json or csv, got '" + s + "'");
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::holds: return "holds";
    case Outcome::fails: return "fails";
    case Outcome::holds_only: return "holds only";
  }
  return "?";
}

std::string Verdict::text() const {
  return scope.empty() ? outcome_name(outcome) : outcome_name(outcome) + (" " + scope);
}

std::size_t Table::column(std::string_view col) const {
  for (std::size_t c = 0; c < columns.size(); ++c)
    if (columns[c] == col) return c;
  throw Error("lab table '" + name + "' has no column '" + std::string(col) + "'");
}

double Table::number(std::size_t r, std::string_view col) const {
  const Cell& c = rows.at(r).at(column(col));
  if (const auto* d = std::get_if<double>(&c)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&c)) return static_cast<double>(*i);
  throw Error("lab table '" + name + "': column '" + std::string(col) + "' holds text, not a number");
}

const std::string& Table::text(std::size_t r, std::string_view col) const {
  const Cell& c = rows.at(r).at(column(col));
  if (const auto* s = std::get_if<std::string>(&c)) return *s;
  throw Error("lab table '" + name + "': column '" + std::string(col) + "' holds a number, not text");
}

std::size_t rows_holding(const Table& t) {
  std::size_t n = 0;
  for (std::size_t r = 0; r < t.rows.size(); ++r) n += t.text(r, "verdict") == "holds";
  return n;
}

Verdict verdict_of_rows(const Table& t) {
  const std::size_t failing = t.rows.size() - rows_holding(t);
  Verdict v;
  v.outcome = failing == 0 && !t.rows.empty() ? Outcome::holds : Outcome::fails;
  if (v.outcome == Outcome::fails) v.scope = fmt::format("in {} of {} rows", failing, t.rows.size());
  return v;
}

nlohmann::ordered_json to_json(const Table& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& row : t.rows) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (std::size_t c = 0; c < t.columns.size(); ++c)
      std::visit(
          [&](const auto& v) {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>)
              o[t.columns[c]] = io::json_number(v);
            else
              o[t.columns[c]] = v;
          },
          row[c]);
    rows.push_back(std::move(o));
  }
  return {{"name", t.name},
          {"title", t.title},
          {"verdict", t.verdict.text()},
          {"outcome", outcome_name(t.verdict.outcome)},
          {"expected", t.verdict.expected},
          {"measured", t.verdict.measured},
          {"tolerance", t.verdict.tolerance},
          {"columns", t.columns},
          {"rows", std::move(rows)}};
}

std::string render(const Table& t, Format f) {
  std::string out;
  if (f == Format::json) return to_json(t).dump(1) + "\n";
  if (f == Format::csv) {
    // Appended piecewise: GCC 12 reports a false -Wrestrict on `"," + std::string&&`.
    for (std::size_t c = 0; c < t.columns.size(); ++c) {
      if (c) out += ',';
      out += csv(t.columns[c]);
    }
    out += "\n";
    for (const auto& row : t.rows) {
      for (std::size_t c = 0; c < row.size(); ++c) {
        if (c) out += ',';
        out += csv(text(row[c]));
      }
      out += "\n";
    }
    return out;
  }
  std::vector<std::size_t> w(t.columns.size());
  for (std::size_t c = 0; c < w.size(); ++c) {
    w[c] = t.columns[c].size();
    for (const auto& row : t.rows) w[c] = std::max(w[c], text(row[c]).size());
  }
  out += t.name + ": " + t.title + "\n";
  for (std::size_t c = 0; c < w.size(); ++c) out += fmt::format("{}{:>{}}", c ? "  " : "", t.columns[c], w[c]);
  out += "\n";
  for (const auto& row : t.rows) {
    for (std::size_t c = 0; c < w.size(); ++c) out += fmt::format("{}{:>{}}", c ? "  " : "", text(row[c]), w[c]);
    out += "\n";
  }
  out += "verdict: " + t.verdict.text() + "\n";
  for (const auto& [label, line] : {std::pair<const char*, const std::string&>{"expected", t.verdict.expected},
                                    {"measured", t.verdict.measured},
                                    {"tolerance", t.verdict.tolerance}})
    if (!line.empty()) out += fmt::format("  {:<10} {}\n", std::string(label) + ":", line);
  return out;
}

}  // namespace sdpa::lab
