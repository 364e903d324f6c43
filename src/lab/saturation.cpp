// saturation.cpp — claim 6: as d_k grows, unscaled attention's largest weight tends to 1
// and its entropy to 0, while scaled attention stays put; and against the number of keys N,
// the largest of N unit-variance scores grows like sqrt(2 ln N), so even scaled attention
// sharpens with sequence length.
#include <algorithm>
#include <cmath>
#include <string>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"

namespace sdpa::lab {

Table saturation(const Common& c) {
  Table t{"saturation",
          "random q and N keys (standard normal): largest attention weight and entropy (nats; uniform = ln N) "
          "against d_k (N = 64) and against N (d_k = 64, scaled); max score against sqrt(2 ln N)",
          {"sweep", "d_k", "N", "scale", "max_weight", "max_weight_lo", "max_weight_hi", "entropy", "entropy_lo",
           "entropy_hi", "ln_N", "max_score", "sqrt_2lnN"},
          {}};
  const std::int64_t T0 = c.samples ? c.samples : 400;
  auto row = [&](const char* sweep, std::int64_t d, std::int64_t N, bool scaled) {
    const std::int64_t T = std::max<std::int64_t>(50, T0 * 64 / std::max<std::int64_t>(N, 64));  // bounded memory
    // One draw per (d_k, N): both temperatures see the same q and k (a paired comparison).
    std::mt19937_64 rng(c.seed * 2654435761u + static_cast<std::uint64_t>(d) * 1000003u +
                        static_cast<std::uint64_t>(N));
    const auto q = gaussian(rng, T * d), k = gaussian(rng, T * N * d);
    const double beta = scaled ? 1.0 / std::sqrt(double(d)) : 1.0;
    std::vector<double> maxw, ent;
    max_and_entropy(weights(q, k, T, N, d, beta, c.threads), T, N, maxw, ent);
    const auto s = scores_all(q, k, T, N, d, beta, c.threads);
    std::vector<double> smax(static_cast<std::size_t>(T), -INFINITY);
    for (std::int64_t i = 0; i < T * N; ++i)
      smax[static_cast<std::size_t>(i / N)] =
          std::max(smax[static_cast<std::size_t>(i / N)], s[static_cast<std::size_t>(i)]);
    const Estimate mw = mean_of(maxw), h = mean_of(ent), ms = mean_of(smax);
    t.add({sweep, d, N, scaled ? "1/sqrt(d_k)" : "1", mw.value, mw.lo(), mw.hi(), h.value, h.lo(), h.hi(),
           std::log(double(N)), ms.value, std::sqrt(2 * std::log(double(N)))});
  };
  for (std::int64_t d : {1, 4, 16, 64, 256, 1024})
    for (bool scaled : {false, true}) row("d_k", d, 64, scaled);
  for (std::int64_t N : {4, 16, 64, 256, 1024, 4096}) row("N", 64, N, true);
  return t;
}

}  // namespace sdpa::lab
