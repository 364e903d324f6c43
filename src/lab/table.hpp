// table.hpp — what every lab experiment returns: named columns, typed cells, and the
// claim-level verdict the experiment reached from those cells.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace sdpa::lab {

using Cell = std::variant<double, std::int64_t, std::string>;

/// How a claim came out. `holds_only`: true under a stated restriction (the verdict's
/// scope says which), false outside it.
enum class Outcome { holds, fails, holds_only };
const char* outcome_name(Outcome o);  // "holds", "fails", "holds only"

/// The claim-level verdict, decided in C++ by the experiment that measured the numbers.
struct Verdict {
  Outcome outcome = Outcome::fails;
  std::string scope;      // qualifies the outcome: "in 3 of 52 rows", "for independent weights"
  std::string expected;   // the claim: what theory or the seed documents say
  std::string measured;   // what the numbers say, in one line
  std::string tolerance;  // the rule that decided, with its constants
  /// What a reader sees: the outcome and its scope, e.g. "holds only for independent weights".
  std::string text() const;
};

struct Table {
  std::string name;   // experiment name, e.g. "variance"
  std::string title;  // one line saying what it shows
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
  Verdict verdict;

  void add(std::vector<Cell> row) { rows.push_back(std::move(row)); }
  /// Index of a column; throws sdpa::Error naming the table when there is none.
  std::size_t column(std::string_view name) const;
  /// A numeric cell (double or int) of row r, by column name.
  double number(std::size_t r, std::string_view col) const;
  /// A text cell of row r, by column name.
  const std::string& text(std::size_t r, std::string_view col) const;
};

/// How many rows' "verdict" cell is "holds".
std::size_t rows_holding(const Table& t);
/// For tables judged row by row: holds when every row's "verdict" cell is "holds",
/// else fails "in K of N rows". Leaves expected, measured and tolerance empty.
Verdict verdict_of_rows(const Table& t);

enum class Format { table, json, csv };
Format parse_format(const std::string& s);  // throws sdpa::Error

/// The table as one JSON object: name, title, verdict, outcome, expected, measured,
/// tolerance, columns, and rows (objects column -> cell, in column order). Cells that
/// are NaN or infinite become null.
nlohmann::ordered_json to_json(const Table& t);

/// Renders a table: aligned text closed by the verdict lines, the JSON object of
/// to_json, or CSV (a header and the rows only: the verdict is no row).
std::string render(const Table& t, Format f);

}  // namespace sdpa::lab
