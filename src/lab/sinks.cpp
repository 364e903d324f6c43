// sinks.cpp — claim 11 (ours): an attention sink σ (one logit per head, a key with no value)
// lets a row withhold weight: the keys share 1 − p_sink instead of 1. Measured with the
// kernel's own sinks (Options::sinks): with scaled scores a large enough sink takes most of
// the mass, so no key wins it all; but it is not a substitute for 1/√d_k — unscaled scores
// grow like √d_k and outrun any fixed sink, so those rows saturate on one key as claim 6 says,
// whatever σ. The softmax Jacobian over the keys (trace Σ_j p_j(1 − p_j), claim 7's gradient
// scale) shrinks with the withheld mass too: a sink trades saturation for silence.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/core.h>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "sdpa/error.hpp"

namespace sdpa::lab {

namespace {
constexpr double kNoSink = -std::numeric_limits<double>::infinity();
}  // namespace

Table sinks(const Settings& c) {
  Table t{"sinks",
          "random q and 64 keys (standard normal), with an attention sink σ (a key with no value) or none: mass the "
          "keys keep, largest key weight and the keys' softmax Jacobian trace, scaled and unscaled, against d_k",
          {"scale", "d_k", "sink", "key_mass", "key_mass_lo", "key_mass_hi", "max_weight", "max_weight_lo",
           "max_weight_hi", "jacobian_trace", "jacobian_trace_lo", "jacobian_trace_hi", "uniform_trace"},
          {},
          {}};
  const std::int64_t T = c.samples ? c.samples : 400, N = 64;
  for (bool scaled : {true, false})
    for (std::int64_t d : {16, 64, 256, 1024}) {
      // One draw per (scale, d_k): every sink sees the same q and k (a paired comparison).
      std::mt19937_64 rng(c.seed * 2654435761u + static_cast<std::uint64_t>(d) * 7919u + (scaled ? 1u : 2u));
      const auto q = gaussian(rng, T * d), k = gaussian(rng, T * N * d);
      const double beta = scaled ? 1.0 / std::sqrt(double(d)) : 1.0;
      for (double sink : {kNoSink, 0.0, 4.0, 8.0}) {
        const auto p = weights(q, k, T, N, d, beta, c.threads, sink);
        std::vector<double> mass(static_cast<std::size_t>(T)), maxw(mass.size()), trace(mass.size());
        for (std::int64_t r = 0; r < T; ++r)
          for (std::int64_t j = 0; j < N; ++j) {
            const double pj = p[static_cast<std::size_t>(r * N + j)];
            const auto at = static_cast<std::size_t>(r);
            mass[at] += pj, maxw[at] = std::max(maxw[at], pj), trace[at] += pj * (1 - pj);
          }
        const Estimate m = mean_of(mass), w = mean_of(maxw), tr = mean_of(trace);
        t.add({scaled ? "1/sqrt(d_k)" : "1", d, sink == kNoSink ? std::string("none") : fmt::format("{:g}", sink),
               m.value, m.lo(), m.hi(), w.value, w.lo(), w.hi(), tr.value, tr.lo(), tr.hi(), 1.0 - 1.0 / N});
      }
    }
  t.verdict = judge_sinks(t);
  return t;
}

// Holds when (a) scaled, at every d_k, the keys' mass falls as the sink rises and the largest
// sink keeps at most kSinkWithheldMass of it (the row withholds its weight rather than putting
// it on one key); and (b) unscaled, at the largest d_k, every sink's row is saturated by claim
// 6's rule (largest key weight ≥ √(1 − kSaturatedFraction·(1 − 1/N))): no fixed sink undoes
// the missing 1/√d_k.
Verdict judge_sinks(const Table& t) {
  double largest_dk = 0;
  for (std::size_t r = 0; r < t.rows.size(); ++r) largest_dk = std::max(largest_dk, t.number(r, "d_k"));
  if (t.rows.empty()) throw Error("sinks: the table has no rows");
  bool falls = true, withheld = true, saturated = true;
  double worst_kept = 0, least_max = 1;
  std::size_t scaled_rows = 0, unscaled_rows = 0;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const bool scaled = t.text(r, "scale") != "1";
    if (scaled) {
      ++scaled_rows;
      // rows of one d_k come in the order none, 0, 4, 8: the mass must not rise along them
      if (r + 1 < t.rows.size() && t.text(r + 1, "scale") == t.text(r, "scale") &&
          t.number(r + 1, "d_k") == t.number(r, "d_k") && t.number(r + 1, "key_mass") > t.number(r, "key_mass"))
        falls = false;
      const bool last_of_dk = r + 1 == t.rows.size() || t.number(r + 1, "d_k") != t.number(r, "d_k") ||
                              t.text(r + 1, "scale") != t.text(r, "scale");
      if (last_of_dk) {
        worst_kept = std::max(worst_kept, t.number(r, "key_mass"));
        withheld = withheld && t.number(r, "key_mass") <= kSinkWithheldMass;
      }
    } else if (t.number(r, "d_k") == largest_dk) {
      ++unscaled_rows;
      const double n_keys = 1.0 / (1.0 - t.number(r, "uniform_trace"));
      const double min_max_weight = std::sqrt(1 - kSaturatedFraction * (1 - 1 / n_keys));
      least_max = std::min(least_max, t.number(r, "max_weight"));
      saturated = saturated && t.number(r, "max_weight") >= min_max_weight;
    }
  }
  if (scaled_rows == 0 || unscaled_rows == 0) throw Error("sinks: the table lacks the scaled or the unscaled sweep");
  Verdict v;
  v.outcome = falls && withheld && saturated ? Outcome::holds : Outcome::fails;
  if (!falls) v.scope = "for the scaled side: the keys' mass rose with the sink";
  if (!withheld)
    v.scope += std::string(v.scope.empty() ? "" : "; ") + "for the scaled side: the largest sink withheld too little";
  if (!saturated)
    v.scope += std::string(v.scope.empty() ? "" : "; ") + "for the unscaled side: a sink undid the saturation";
  v.measured = fmt::format(
      "scaled: the keys keep at most {:.3f} of the mass under the largest sink (every d_k); unscaled at d_k = {:g}: "
      "the largest key weight is at least {:.3f} under every sink",
      worst_kept, largest_dk, least_max);
  v.tolerance = fmt::format(
      "scaled: key mass non-increasing in σ and ≤ {:g} at the largest σ; unscaled, largest d_k: max key weight ≥ "
      "√(1 − {:g}(1 − 1/N)) under every σ (claim 6's saturation rule); means over the draws, paired across σ",
      kSinkWithheldMass, kSaturatedFraction);
  return v;
}

}  // namespace sdpa::lab
