// common_draw.hpp — small helpers the experiment files share.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "lab/stats.hpp"

namespace sdpa::lab {

inline std::vector<float> gaussian(std::mt19937_64& rng, std::int64_t count, double sigma = 1.0, double mu = 0.0) {
  std::normal_distribution<double> z;
  std::vector<float> x(static_cast<std::size_t>(count));
  for (auto& e : x) e = static_cast<float>(mu + sigma * z(rng));
  return x;
}

/// Per problem t of N weights: the largest weight and the entropy (nats).
inline void max_and_entropy(const std::vector<double>& p, std::int64_t T, std::int64_t N, std::vector<double>& maxw,
                            std::vector<double>& ent) {
  maxw.assign(static_cast<std::size_t>(T), 0.0);
  ent.assign(static_cast<std::size_t>(T), 0.0);
  for (std::int64_t t = 0; t < T; ++t) {
    double m = 0, h = 0;
    for (std::int64_t j = 0; j < N; ++j) {
      const double w = p[static_cast<std::size_t>(t * N + j)];
      m = std::max(m, w);
      if (w > 0) h -= w * std::log(w);
    }
    maxw[static_cast<std::size_t>(t)] = m;
    ent[static_cast<std::size_t>(t)] = h;
  }
}

/// Root mean square of the per-problem Euclidean norms of rows of width w.
inline Estimate row_norms(const std::vector<double>& x, std::int64_t w) {
  std::vector<double> norms;
  for (std::size_t r = 0; r + static_cast<std::size_t>(w) <= x.size(); r += static_cast<std::size_t>(w)) {
    double s = 0;
    for (std::int64_t e = 0; e < w; ++e) s += x[r + static_cast<std::size_t>(e)] * x[r + static_cast<std::size_t>(e)];
    norms.push_back(std::sqrt(s));
  }
  return mean_of(norms);
}

}  // namespace sdpa::lab
