// nn/init.hpp — weight initialisation: Xavier/Glorot uniform, or normal with a given σ.
#pragma once

#include <string>

#include "nn/common.hpp"

namespace sdpa::nn {

struct Init {
  bool xavier = true;  // else normal(0, sigma)
  double sigma = 0.02;
  std::string name() const;
};

/// "xavier" or "normal:<sigma>"; throws sdpa::Error naming `what`.
Init parse_init(const std::string& s, const std::string& what = "init");

/// Fills a (fan_in, fan_out) matrix: Xavier uniform U(±√(6/(fan_in+fan_out))),
/// variance 2/(fan_in+fan_out); or N(0, σ²).  w (fan_in, ld), columns [0, fan_out)
template <class T>
void init_matrix(T* w, i64 fan_in, i64 fan_out, i64 ld, const Init& init, Rng& rng) {
  const double a = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  for (i64 i = 0; i < fan_in; ++i)
    for (i64 j = 0; j < fan_out; ++j)
      w[i * ld + j] = static_cast<T>(init.xavier ? a * (2.0 * rng.uniform() - 1.0) : init.sigma * rng.normal());
}

}  // namespace sdpa::nn
