// nn/common.hpp — what every layer of the training lab shares.
//
// Dimension letters, used in every shape comment under src/nn/:
//   B batch, T sequence length (tokens), C model width (d_model), H heads,
//   D head width (d_k = d_v = C / H), V vocabulary size, R = B*T rows.
//
// Gradient contract (every layer): parameter gradients are accumulated with `+=`,
// activation gradients are written with `=`. Layers are templates over the element
// type T: float for training, double for the finite-difference tests.
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "sdpa/error.hpp"

namespace sdpa::nn {

using i64 = std::int64_t;

/// splitmix64: a small, fast, well-mixed generator. Every random stream in the lab
/// (initialisation, task batches) is one of these seeded from (seed, purpose, step),
/// so a batch depends only on its step number — which is what makes resuming exact.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (n >= 1); the modulo bias is < n / 2^64.
  i64 below(i64 n) { return static_cast<i64>(next() % static_cast<std::uint64_t>(n)); }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Standard normal (Box–Muller, one value per call).
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

/// Calls f(lo, hi) on this thread's share of [0, n), in fixed contiguous blocks, on the
/// calling thread's OpenMP team (omp_get_max_threads()). Every layer splits its work so
/// that each output element is computed by one thread with the same operations in the
/// same order whatever the split: the bits do not depend on the thread count.
template <class F>
void split(i64 n, F&& f) {
#pragma omp parallel
  {
    const i64 t = omp_get_thread_num(), nt = omp_get_num_threads();
    const i64 lo = n * t / nt, hi = n * (t + 1) / nt;
    if (lo < hi) f(lo, hi);
  }
}

/// A stream seeded from a base seed and up to two labels (purpose, step).
inline Rng stream(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
  Rng r(seed ^ (a * 0xD1B54A32D192ED03ull));
  r.next();
  Rng out(r.next() ^ (b * 0x8CB92BA72F3D8DD7ull));
  out.next();
  return out;
}

}  // namespace sdpa::nn
