// probe.cpp — see probe.hpp.
#include "lab/probe.hpp"

#include "sdpa/sdpa.hpp"

namespace sdpa::lab {

std::vector<double> scores(const std::vector<float>& q, const std::vector<float>& k, std::int64_t n, std::int64_t d,
                           double beta, int threads) {
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f), out(static_cast<std::size_t>(n)), lse(static_cast<std::size_t>(n));
  Options opt;
  opt.scale = beta;
  opt.threads = threads;
  forward(contiguous<const float>(q.data(), {n, 1, 1, d}), contiguous<const float>(k.data(), {n, 1, 1, d}),
          contiguous<const float>(v.data(), {n, 1, 1, 1}), contiguous(out.data(), {n, 1, 1, 1}),
          contiguous(lse.data(), {n, 1, 1}), opt);
  return {lse.begin(), lse.end()};
}

std::vector<double> softmax(const std::vector<double>& z, double beta) {
  const auto n = static_cast<std::int64_t>(z.size());
  std::vector<float> q{1.0f}, k(z.begin(), z.end()), v(static_cast<std::size_t>(n * n), 0.0f), out(z.size());
  for (std::int64_t j = 0; j < n; ++j) v[static_cast<std::size_t>(j * n + j)] = 1.0f;
  Options opt;
  opt.scale = beta;
  forward(contiguous<const float>(q.data(), {1, 1, 1, 1}), contiguous<const float>(k.data(), {1, 1, n, 1}),
          contiguous<const float>(v.data(), {1, 1, n, n}), contiguous(out.data(), {1, 1, 1, n}), View3<float>{}, opt);
  return {out.begin(), out.end()};
}

}  // namespace sdpa::lab
