// table.cpp — rendering lab tables.
#include "lab/table.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

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

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (ch == '\n') {
      o += "\\n";
      continue;
    }
    o += ch;
  }
  return o + "\"";
}

std::string json(const Cell& c) {
  if (const auto* d = std::get_if<double>(&c)) return std::isfinite(*d) ? fmt::format("{:.17g}", *d) : "null";
  if (const auto* i = std::get_if<std::int64_t>(&c)) return std::to_string(*i);
  return json_string(std::get<std::string>(c));
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

std::string render(const Table& t, Format f) {
  std::string out;
  if (f == Format::json) {
    out = "[";
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      out += r ? ",\n " : "";
      out += "{";
      for (std::size_t c = 0; c < t.columns.size(); ++c)
        out += (c ? ", " : "") + json_string(t.columns[c]) + ": " + json(t.rows[r][c]);
      out += "}";
    }
    return out + "]\n";
  }
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
  return out;
}

}  // namespace sdpa::lab
