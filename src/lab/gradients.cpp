// gradients.cpp — claim 7: "without scaling, softmax gradients vanish". Which gradient?
// For L = g·out with random upstream g, measured with the library's backward:
//   ∂L/∂s   w.r.t. the logits s = β q·k   (the softmax Jacobian applied to V g)
//   ∂L/∂x   w.r.t. the raw dot products x = q·k: β·∂L/∂s
//   ∂L/∂q   w.r.t. the query: Σ_j ∂L/∂x_j k_j
// Two sweeps: d_k with β = 1 and β = 1/sqrt(d_k); then the logit scale β·sqrt(d_k) at
// fixed d_k, where the Jacobian's norm rises and then falls (it is not monotone).
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "sdpa/error.hpp"

namespace sdpa::lab {

Table gradients(const Settings& c) {
  Table t{"gradients",
          "mean gradient norms of L = g.out (N = 64 keys, random q, k, v, g) w.r.t. the logits, the raw q.k and q, "
          "with the library's backward; sweeps over d_k and over the logit scale beta*sqrt(d_k) at d_k = 64",
          {"sweep", "d_k", "beta", "logit_std", "grad_logits", "grad_logits_lo", "grad_logits_hi", "grad_qk", "grad_q",
           "grad_q_lo", "grad_q_hi", "max_weight"},
          {},
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
  t.verdict = judge_gradients(t);
  return t;
}

// "Vanishes" is a trend, judged at the d_k sweep's end: the unscaled gradient against
// the scaled one at the same d_k (the same q, k distributions, only β differs).
Verdict judge_gradients(const Table& t) {
  std::vector<std::size_t> unscaled, scaled, by_scale;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    if (t.text(r, "sweep") != "d_k")
      by_scale.push_back(r);
    else if (t.number(r, "beta") == 1)
      unscaled.push_back(r);
    else
      scaled.push_back(r);
  }
  if (unscaled.empty() || scaled.empty() || by_scale.empty()) throw Error("gradients: the table lacks a sweep");
  const auto largest_dk = [&](const std::vector<std::size_t>& rs) {
    return *std::max_element(rs.begin(), rs.end(),
                             [&](std::size_t a, std::size_t b) { return t.number(a, "d_k") < t.number(b, "d_k"); });
  };
  const std::size_t first = unscaled.front(), u = largest_dk(unscaled), s = largest_dk(scaled);
  if (t.number(u, "d_k") != t.number(s, "d_k")) throw Error("gradients: the two d_k sweeps end apart");
  const double logits_ratio = t.number(u, "grad_logits") / t.number(s, "grad_logits");
  const double q_ratio = t.number(u, "grad_q") / t.number(s, "grad_q");
  const bool logits_vanish = logits_ratio < kVanishedFraction, q_vanishes = q_ratio < kVanishedFraction;

  Verdict v;
  v.outcome = logits_vanish && q_vanishes   ? Outcome::holds
              : logits_vanish || q_vanishes ? Outcome::holds_only
                                            : Outcome::fails;
  if (v.outcome == Outcome::holds_only)
    v.scope = logits_vanish ? "for the gradient w.r.t. the logits (and q·k)" : "for the gradient w.r.t. q";
  const std::size_t peak = *std::max_element(by_scale.begin(), by_scale.end(), [&](std::size_t a, std::size_t b) {
    return t.number(a, "grad_logits") < t.number(b, "grad_logits");
  });
  v.measured = fmt::format(
      "w.r.t. the logits, unscaled: {:.2f} at d_k = {:g} → {:.2f} at d_k = {:g} (scaled stays ≈ {:.2f}; ratio {:.2f}); "
      "w.r.t. q, unscaled: {:.2f} → {:.2f} ({}; ratio {:.2f}); along the logit scale the logit gradient peaks at "
      "scale {:g} ({:.2f})",
      t.number(first, "grad_logits"), t.number(first, "d_k"), t.number(u, "grad_logits"), t.number(u, "d_k"),
      t.number(s, "grad_logits"), logits_ratio, t.number(first, "grad_q"), t.number(u, "grad_q"),
      t.number(u, "grad_q") > t.number(first, "grad_q") ? "it grows" : "it falls", q_ratio, t.number(peak, "logit_std"),
      t.number(peak, "grad_logits"));
  v.tolerance = fmt::format(
      "a gradient vanishes when at the largest d_k ({:g}) the unscaled one is below {:g} of the scaled one; the "
      "logit-scale sweep is shown, not judged",
      t.number(u, "d_k"), kVanishedFraction);
  return v;
}

}  // namespace sdpa::lab
