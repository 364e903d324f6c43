// sdpa/error.hpp — the one exception type sdpa throws for bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace sdpa {

/// Thrown for every invalid argument: bad shapes, strides, aliasing, non-finite
/// scale, overflowing sizes, unreadable files. The message names the argument
/// and, where shapes are involved, the shapes. It is one line (no '\n').
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace sdpa
