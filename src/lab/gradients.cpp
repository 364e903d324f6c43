// gradients.cpp — claim 7: "without scaling, softmax gradients vanish". Which gradient?
// For L = g·out with random upstream g, measured with the library's backward:
//   ∂L/∂s   w.r.t. the logits s = β q·k   (the softmax Jacobian applied to V g)
//   ∂L/∂x   w.r.t. the raw dot products x = q·k: β·∂L/∂s
//   ∂L/∂q   w.r.t. the query: Σ_j ∂L/∂x_j k_j
// Two sweeps: d_k with β = 1 and β = 1/sqrt(d_k); then the logit scale β·sqrt(d_k) at
// fixed d_k, where the Jacobian's norm rises and then falls (it is not monotone).
#include <cmath>
#include <string>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"

namespace sdpa::lab {

Table gradients(const Common& c) {
  Table t{"gradients",
          "mean gradient norms of L = g.out (N = 64 keys, random q, k, v, g) w.r.t. the logits, the raw q.k and q, "
          "with the library's backward; sweeps over d_k and over the logit scale beta*sqrt(d_k) at d_k = 64",
          {"sweep", "d_k", "beta", "logit_std", "grad_logits", "grad_logits_lo", "grad_logits_hi", "grad_qk", "grad_q",
           "grad_q_lo", "grad_q_hi", "max_weight"},
          {}};
  const std::int64_t T = c.samples ? c.samples : 300, N = 64, dv = 16;
  std::uint64_t stream = 0;
  auto row = [&](const char* sweep, std::int64_t d, double beta) {
    std::mt19937_64 rng(c.seed * 40503u + stream++);
    const auto q = gaussian(rng, T * d), k = gaussian(rng, T * N * d), v = gaussian(rng, T * N * dv),
               g = gaussian(rng, T * dv);
    const Grads gr = gradients(q, k, v, g, T, N, d, dv, beta, c.threads);
    std::vector<double> maxw, ent;
    max_and_entropy(weights(q, k, T, N, d, beta, c.threads), T, N, maxw, ent);
    const Estimate gl = row_norms(gr.dlogits, N), gq = row_norms(gr.dq, d);
    t.add({sweep, d, beta, std::abs(beta) * std::sqrt(double(d)), gl.value, gl.lo(), gl.hi(), std::abs(beta) * gl.value,
           gq.value, gq.lo(), gq.hi(), mean_of(maxw).value});
  };
  for (std::int64_t d : {1, 4, 16, 64, 256, 1024}) {
    row("d_k", d, 1.0);
    row("d_k", d, 1.0 / std::sqrt(double(d)));
  }
  for (double scale : {0.01, 0.1, 0.3, 1.0, 2.0, 4.0, 8.0, 32.0}) row("logit_scale", 64, scale / 8.0);
  return t;
}

}  // namespace sdpa::lab
