// softmax.cpp — claim 5: the softmax values the seeds quote, computed by the library.
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "lab/experiments.hpp"
#include "lab/probe.hpp"

namespace sdpa::lab {

Table softmax_numbers(const Settings&) {
  Table t{"softmax",
          "the softmax values quoted by seeds 002 and 003, from sdpa::forward (q = [1], k_j = [z_j], v = I); "
          "'holds' when the library's value rounds to the quoted one",
          {"seed", "logits", "beta", "index", "value", "quoted", "decimals", "verdict"},
          {},
          {}};
  struct Case {
    const char* seed;
    std::vector<double> z;
    double beta;
    std::vector<double> quoted;
    int decimals;
  };
  const Case cases[] = {
      {"003", {50, 10, 5}, 1.0, {1, 0, 0}, 3},
      {"003", {5, 1, 0.5}, 1.0, {0.971, 0.018, 0.011}, 3},
      {"003", {14, 10, 12}, 1.0, {0.867, 0.016, 0.117}, 3},
      {"003", {14, 10, 12}, 1.0 / 8.0, {0.419, 0.254, 0.326}, 3},
      {"002", {1, 1, 1, 5}, 1.0, {0.0174, 0.0174, 0.0174, 0.9479}, 4},
  };
  for (const auto& c : cases) {
    const auto p = softmax(c.z, c.beta);
    std::string logits = "[";
    for (std::size_t j = 0; j < c.z.size(); ++j) logits += (j ? ", " : "") + fmt::format("{:g}", c.z[j]);
    logits += "]";
    const double unit = std::pow(10.0, c.decimals);
    for (std::size_t j = 0; j < p.size(); ++j) {
      const bool ok = std::round(p[j] * unit) == std::round(c.quoted[j] * unit);
      t.add({c.seed, logits, c.beta, static_cast<std::int64_t>(j), p[j], c.quoted[j],
             static_cast<std::int64_t>(c.decimals), ok ? "holds" : "fails"});
    }
  }
  t.verdict = judge_softmax(t);
  return t;
}

Verdict judge_softmax(const Table& t) {
  Verdict v = verdict_of_rows(t);
  // One group per (logits, beta): "[14, 10, 12]/8 → [0.419, 0.254, 0.326]".
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const bool first =
        r == 0 || t.text(r, "logits") != t.text(r - 1, "logits") || t.number(r, "beta") != t.number(r - 1, "beta");
    if (first) {
      if (r) v.measured += "]; ";
      v.measured += t.text(r, "logits");
      if (t.number(r, "beta") != 1) v.measured += fmt::format("/{:g}", 1 / t.number(r, "beta"));
      v.measured += " → [";
    } else {
      v.measured += ", ";
    }
    v.measured += fmt::format("{:.{}f}", t.number(r, "value"), static_cast<int>(t.number(r, "decimals")));
  }
  if (!t.rows.empty()) v.measured += "]";
  v.tolerance = "every value equal to the quoted one after rounding to the quoted decimals";
  return v;
}

}  // namespace sdpa::lab
