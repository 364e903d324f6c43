// probe.cpp — see probe.hpp.
#include "lab/probe.hpp"

#include "sdpa/sdpa.hpp"

namespace sdpa::lab {

std::vector<double> scores(const std::vector<float>& q, const std::vector<float>& k, std::int64_t n, std::int64_t d,
                           double beta, int threads) {
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f), out(static_cast<std::size_t>(n)),
      lse(static_cast<std::size_t>(n));
  Options opt;
  opt.scale = beta;
  opt.threads = threads;
  forward(contiguous<const float>(q.data(), {n, 1, 1, d}), contiguous<const float>(k.data(), {n, 1, 1, d}),
          contiguous<const float>(v.data(), {n, 1, 1, 1}), contiguous(out.data(), {n, 1, 1, 1}),
          contiguous(lse.data(), {n, 1, 1}), opt);
  return {lse.begin(), lse.end()};
}

std::vector<double> scores_all(const std::vector<float>& q, const std::vector<float>& k, std::int64_t T, std::int64_t N,
                               std::int64_t d, double beta, int threads) {
  std::vector<float> v(static_cast<std::size_t>(T * N), 0.0f), out(v.size()), lse(v.size());
  Options opt;
  opt.scale = beta;
  opt.threads = threads;
  forward(View4<const float>{q.data(), {T, N, 1, d}, {d, 0, d, 1}}, contiguous<const float>(k.data(), {T, N, 1, d}),
          contiguous<const float>(v.data(), {T, N, 1, 1}), contiguous(out.data(), {T, N, 1, 1}),
          contiguous(lse.data(), {T, N, 1}), opt);
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

std::vector<double> weights(const std::vector<float>& q, const std::vector<float>& k, std::int64_t T, std::int64_t N,
                            std::int64_t d, double beta, int threads, double sink) {
  std::vector<float> v(static_cast<std::size_t>(N * N), 0.0f), out(static_cast<std::size_t>(T * N));
  for (std::int64_t j = 0; j < N; ++j) v[static_cast<std::size_t>(j * N + j)] = 1.0f;
  Options opt;
  opt.scale = beta;
  opt.threads = threads;
  const float sink_logit = static_cast<float>(sink);  // one head: the sink of every problem
  if (sink_logit != -std::numeric_limits<float>::infinity()) opt.sinks = {&sink_logit, {1}, {1}};
  const View4<const float> vv{v.data(), {T, 1, N, N}, {0, 0, N, 1}};  // one identity shared by all problems
  forward(contiguous<const float>(q.data(), {T, 1, 1, d}), contiguous<const float>(k.data(), {T, 1, N, d}), vv,
          contiguous(out.data(), {T, 1, 1, N}), View3<float>{}, opt);
  return {out.begin(), out.end()};
}

Grads gradients(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                const std::vector<float>& g, std::int64_t T, std::int64_t N, std::int64_t d, std::int64_t dv,
                double beta, int threads) {
  Options opt;
  opt.scale = beta;
  opt.threads = threads;
  auto run = [&](const std::vector<float>& qq, const View4<const float>& kk, std::int64_t dd, std::vector<float>& dq) {
    std::vector<float> out(static_cast<std::size_t>(T * dv)), lse(static_cast<std::size_t>(T)),
        dk(static_cast<std::size_t>(T * N * dd)), dvv(v.size());
    const auto Q = contiguous<const float>(qq.data(), {T, 1, 1, dd});
    const auto V = contiguous<const float>(v.data(), {T, 1, N, dv});
    forward(Q, kk, V, contiguous(out.data(), {T, 1, 1, dv}), contiguous(lse.data(), {T, 1, 1}), opt);
    dq.assign(static_cast<std::size_t>(T * dd), 0.0f);
    backward(Q, kk, V, contiguous<const float>(out.data(), {T, 1, 1, dv}),
             contiguous<const float>(lse.data(), {T, 1, 1}), contiguous<const float>(g.data(), {T, 1, 1, dv}),
             contiguous(dq.data(), {T, 1, 1, dd}), contiguous(dk.data(), {T, 1, N, dd}),
             contiguous(dvv.data(), {T, 1, N, dv}), opt);
  };
  Grads r;
  std::vector<float> dq;
  run(q, contiguous<const float>(k.data(), {T, 1, N, d}), d, dq);
  r.dq.assign(dq.begin(), dq.end());
  // The logits s_tj = β q_t·k_tj, as a query of width N against identity keys with β = 1:
  // the same softmax, and now dq = ∂L/∂s.
  const auto s = scores_all(q, k, T, N, d, beta, threads);
  std::vector<float> sq(s.begin(), s.end()), eye(static_cast<std::size_t>(N * N), 0.0f);
  for (std::int64_t j = 0; j < N; ++j) eye[static_cast<std::size_t>(j * N + j)] = 1.0f;
  opt.scale = 1.0;
  run(sq, View4<const float>{eye.data(), {T, 1, N, N}, {0, 0, N, 1}}, N, dq);
  r.dlogits.assign(dq.begin(), dq.end());
  return r;
}

}  // namespace sdpa::lab
