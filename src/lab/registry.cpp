// registry.cpp — see registry.hpp. The claims are the seed documents'; the discussions
// say what the default run shows (derivations: docs/lab.md, one section per name).
#include "lab/registry.hpp"

#include <array>
#include <chrono>

#include "lab/table.hpp"
#include "sdpa/dispatch.hpp"
#include "sdpa/error.hpp"
#include "sdpa/version.hpp"

namespace sdpa::lab {
namespace {

const std::array kExperiments{
    Experiment{
        "variance", "1. The variance of q·k", "000, 001, 003",
        "Var(q.k) = d_k for d_k = 1..4096 and four distributions; 1 after dividing by sqrt(d_k)",
        "Var(q·k) = d_k; Var(q·k/√d_k) = 1; E[q·k] = 0",
        "Holds for every distribution tried, heavy-tailed Student-t₅ included: only independence, zero mean and "
        "unit variance of the entries matter, not their shape. The spread of the estimate does depend on the fourth "
        "moment (widest for Student-t₅, zero for Rademacher at d_k = 1).",
        true, variance},
    Experiment{"scaling", "1b. Dividing by c divides the variance by c²", "003",
               "dividing scores by c divides their variance by c^2",
               "dividing by c divides the variance by c² (seed 003: 2.67 → 0.67 for [2, 4, 6] / 2)",
               "Variance is quadratic in scale, so dividing by √d_k undoes a variance of d_k.", false, scaling},
    Experiment{"general", "2. The general product-variance formula", "000",
               "the general product-variance formula with non-zero means and other variances",
               "Var(XY) = (σx²+μx²)(σy²+μy²) − μx²μy², so Var(q·k) = d_k times that",
               "The formula holds; what fails is 1/√d_k as a normaliser once entries have a mean or another variance "
               "— the mean also shifts E[q·k] to d_k·μx·μy.",
               false, general},
    Experiment{"matrix", "3. The 1111×111 matrix experiment", "000, 001",
               "the 1111x111 matrix experiment (var ~ 111, ~ 1 scaled)",
               "A (1111×111)·B (111×1111): variance ≈ 111, ≈ 1 after /√111 (seed printed 110.56, 0.996)",
               "The seed's numbers are one typical draw. The exact expectation of numpy's var() here is "
               "(1 − 1/1111²)·111, indistinguishable from 111.",
               false, matrix},
    Experiment{"puzzle", "4. The 2×2 puzzle", "000, 001", "why a 2x2 experiment printed a variance of 1.6",
               "a 2×2 experiment printed a variance of 1.6 instead of d_k = 2 (or 1 scaled): numpy's var() of the "
               "n² entries has expectation (1 − 1/n²)·n, 1.5 at n = 2",
               "Nothing was wrong: var() divides by the number of entries around their own mean, so its expectation "
               "is (1 − 1/4)·2 = 1.5, and with only four uncorrelated, heavy-tailed entries one draw can be almost "
               "anything (sd ≈ 2). 1.6 is a typical value. The relative spread falls like 1/n.",
               false, puzzle},
    Experiment{"softmax", "5. The softmax numbers", "002, 003", "the softmax values the seeds quote, from the library",
               "softmax([50,10,5]) ≈ [1,0,0]; ([5,1,0.5]) = [0.971,0.018,0.011]; ([14,10,12]) = "
               "[0.867,0.016,0.117]; ([14,10,12]/8) = [0.419,0.254,0.326]; ([1,1,1,5]) = "
               "[0.0174,0.0174,0.0174,0.9479]",
               "Computed by sdpa::forward itself (one query [1], keys z_j, values = identity), so these are the "
               "kernel's own probabilities. Dividing [14, 10, 12] by 8 turns an 87% winner into a 42% one.",
               false, softmax_numbers},
    Experiment{"saturation", "6. Saturation", "001, 002, 003",
               "max weight and entropy against d_k (scaled, unscaled) and against N",
               "unscaled: max weight → 1, entropy → 0 as d_k grows; scaled: both independent of d_k; the largest of "
               "N scores grows like σ√(2 ln N)",
               "Scaling fixes the dependence on d_k, not on N: at d_k = 64 the largest weight falls and the entropy "
               "rises with N, and the largest score creeps towards √(2 ln N) only slowly (the bound is asymptotic). "
               "At d_k = 1 the scaled score's scale |q| varies from query to query, hence the small offset.",
               false, saturation},
    Experiment{"gradients", "7. Vanishing gradients", "002, 003",
               "which gradients vanish without scaling, and the non-monotone softmax Jacobian",
               "without 1/√d_k, softmax saturates and its gradients vanish",
               "The vanishing is real for ∂L/∂s: the softmax Jacobian diag(p) − ppᵀ shrinks as p becomes one-hot. "
               "But ∂L/∂q = β Σ_j ∂L/∂s_j k_j is multiplied by keys whose norm grows like √d_k, and it grows with "
               "d_k here. And the Jacobian's norm is not monotone in the logit scale: very small logits give a nearly "
               "uniform softmax whose Jacobian is also small (≈ (I − 11ᵀ/N)/N), so it peaks at moderate scale.",
               false, gradients},
    Experiment{"alternatives", "8. Other temperatures", "002",
               "1/sqrt(d_k) against 1, 1/d_k, 1/ln d_k and cosine similarity",
               "why 1/√d_k and not 1, 1/d_k, 1/ln d_k or cosine similarity? At initialisation the score std is "
               "β·E‖q‖·c₄(64), i.e. β√d_k up to a finite-size factor tending to 1: only β = 1/√d_k keeps it "
               "independent of d_k",
               "Only 1/√d_k keeps the score scale, and with it the entropy, independent of d_k at initialisation. "
               "That is all it promises: μP's 1/d_k is chosen for how updates scale during training, and cosine "
               "attention with a learned τ sets its own scale — the training lab compares them in use.",
               false, alternatives},
    Experiment{"projections", "9. Projections, Xavier and LayerNorm", "001, 002, 004",
               "q = xW_q, k = xW_k: Xavier, LayerNorm, and the self-attention diagonal",
               "with q = xW_q, k = x'W_k: Var(q·k) = (d_x E[x²] σ_Wq²)(d_x E[x'²] σ_Wk²)·d_k and E[q·k] = 0; "
               "Xavier and LayerNorm bring it back to ≈ d_k",
               "With unit inputs and weights the score variance is d_x²·d_k (262 144 here) — 1/√d_k is hopeless "
               "without a normalised init. σ_W² = 1/d_x restores d_k exactly; Xavier's 2/(d_x + d_k) does so only "
               "when d_x = d_k (×2.56 at d_x = 4d_k). Un-normalised inputs (mean 0.5, sd 3) multiply it by "
               "E[x²]² ≈ 86; LayerNorm fixes that. On the self-attention diagonal, q_i and k_i come from the same "
               "token: with tied or correlated weights E[q·k] = E[x²]·tr(W_qᵀW_k) ≠ 0 and the variance is off by "
               "2–4×; even between different tokens tied weights double it.",
               false, projections},
    Experiment{"precision", "10. Scaling and 16-bit rounding", "(none: the seeds never discuss rounding)",
               "fp16 and bf16 attention against fp64, scaled and unscaled, d_k = 16..4096",
               "with β = 1/√d_k the rounding error of fp16/bf16 attention stays at a few units of the dtype's "
               "roundoff for every d_k; unscaled scores stored in the dtype carry √d_k times the absolute error, "
               "and the output error grows with d_k",
               "Scaling matters for rounding only where the scores themselves are rounded: a 16-bit score s carries "
               "an error of u·|s|, and the softmax turns absolute score errors into relative weight errors, so "
               "unscaled scores (|s| ∝ √d_k) lose accuracy as d_k grows while scaled ones do not. Keeping the "
               "scores in fp32, as FlashAttention and sdpa's kernels do, makes both equally accurate: the rounding "
               "left is that of P and out.",
               false, precision},
    Experiment{"sinks", "11. Attention sinks", "(none: sinks postdate the seeds; gpt-oss learns one per head)",
               "what a sink logit does to saturation and to the keys' gradients, scaled and unscaled",
               "a sink σ, a key with no value, lets a row withhold weight: with scaled scores a large σ takes most "
               "of the mass and no key wins it all; it does not replace 1/√d_k: unscaled scores outgrow any fixed σ "
               "and those rows still saturate on one key",
               "The sink changes how much of the row the keys share, not how the keys share it: the ratios between "
               "key weights are the plain softmax's. So it cures the forced choice (a row with nothing relevant to "
               "read can put its weight on nothing) but not the saturation of claim 6, which comes from the scores' "
               "scale. And the keys' Jacobian shrinks with the mass withheld (trace ≈ key mass when no key "
               "dominates): a row that withholds its weight also passes less gradient to its keys — a dormant head "
               "rather than a saturated one.",
               false, sinks},
    Experiment{"kvquant", "12. Quantized keys and the temperature", "(none: 8-bit KV caches postdate the seeds)",
               "the score and weight error of an int8 or fp8 key cache against d_k, scaled and unscaled",
               "a key stored in 8 bits is off by δk and its score by β·q·δk, of rms β·√(E‖q‖²·E[δk²]) ≈ "
               "β·√d_k·rms(δk): under 1/√d_k that stays O(1) whatever d_k, under β = 1 it grows like √d_k",
               "Scaled, the score error barely moves with d_k (int8 ×1.5 from d_k = 16 to 256, as its step follows the "
               "row's largest element; fp8 ×1.15), and so does the weights' error; unscaled it grows ×4.6–5.9, √16 "
               "times more, on the same codes. The weights suffer less than the scores because unscaled rows are "
               "saturated (claim 6): a row near one-hot moves little when its logits do — one failure masking "
               "another. fp8 e4m3 keeps 3 mantissa bits, so its errors are ~4.7× int8's on Gaussian keys; it wins "
               "only on rows with outliers, where int8's step is set by the largest element.",
               false, kvquant},
};

}  // namespace

std::span<const Experiment> experiments() { return kExperiments; }

const Experiment& find_experiment(std::string_view name) {
  for (const Experiment& e : kExperiments)
    if (e.name == name) return e;
  std::string known;
  for (const Experiment& e : kExperiments) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw Error("experiment: unknown lab experiment '" + std::string(name) + "' (known: " + known + ")");
}

void check(const Settings& s) {
  if (s.samples < 0)
    throw Error("samples: must be >= 0 (0: each experiment's default), got " + std::to_string(s.samples));
  if (s.threads < 0) throw Error("threads: must be >= 0 (0: all available), got " + std::to_string(s.threads));
}

Table run(const Experiment& e, const Settings& s) {
  check(s);
  Table t = e.measure(s);
  t.verdict.expected = e.claim;
  return t;
}

Table run(std::string_view name, const Settings& s) { return run(find_experiment(name), s); }

nlohmann::ordered_json report(const Settings& s, const ReportProgress& progress) {
  check(s);
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const auto list = experiments();
  const auto t_start = Clock::now();
  nlohmann::ordered_json tables = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (progress) progress(i, list.size(), list[i]);
    const auto t0 = Clock::now();
    nlohmann::ordered_json e = to_json(run(list[i], s));
    e["heading"] = list[i].heading;
    e["seeds"] = list[i].seeds;
    e["discussion"] = list[i].discussion;
    e["seconds"] = seconds_since(t0);
    tables.push_back(std::move(e));
  }
  return {{"version", SDPA_VERSION_STRING},
          {"isa", isa_name(active_isa())},
          {"seed", s.seed},
          {"samples", s.samples},  // 0: each experiment's default; otherwise a draft at that size
          {"experiments", std::move(tables)},
          {"experiments_seconds", seconds_since(t_start)}};
}

}  // namespace sdpa::lab
