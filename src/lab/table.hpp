// table.hpp — what every lab experiment returns: named columns, typed cells.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace sdpa::lab {

using Cell = std::variant<double, std::int64_t, std::string>;

struct Table {
  std::string name;   // experiment name, e.g. "variance"
  std::string title;  // one line saying what it shows
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;

  void add(std::vector<Cell> row) { rows.push_back(std::move(row)); }
};

enum class Format { table, json, csv };
Format parse_format(const std::string& s);  // throws sdpa::Error

/// Renders a table: aligned text, a JSON list of row objects, or CSV with a header.
std::string render(const Table& t, Format f);

}  // namespace sdpa::lab
