// normals.hpp — the random inputs of `sdpa check` and `sdpa bench`: standard normal floats drawn
// in order from one seeded mt19937_64 per call site, so every run on every machine times and
// checks the same numbers.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace sdpa::bench {

class Normals {
 public:
  explicit Normals(std::uint64_t seed) : rng_(seed) {}
  // The next x.size() draws into x, each converted to T (a 16-bit T rounds it).
  template <class T>
  void fill(std::vector<T>& x) {
    for (T& e : x) e = T(normal_(rng_));
  }
  // The next n draws.
  std::vector<float> take(std::int64_t n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    fill(x);
    return x;
  }

 private:
  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

}  // namespace sdpa::bench
