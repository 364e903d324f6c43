// io/json.hpp — the one rule for a number in the project's JSON (nlohmann-json, keys in
// the order written).
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

namespace sdpa::io {

/// JSON has no NaN or infinity: a non-finite value is null. (nlohmann writes null for them
/// too, but only when dumping; a document compared or converted before that needs null
/// already, and NaN != NaN would make two equal documents differ.)
inline nlohmann::ordered_json json_number(double x) {
  return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
}

}  // namespace sdpa::io
