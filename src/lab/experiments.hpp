// experiments.hpp — each claim of the seed documents as a function returning a table,
// and beside each the function that judges the claim from that table's numbers.
// Every score, softmax and gradient comes from the library (sdpa::forward/backward),
// never from a second formula written beside it (see probe.hpp). Front ends reach these
// through the registry (registry.hpp), which names them and states each claim.
//
// Each experiment ends with `t.verdict = judge_X(t)`: the judge reads only the table's
// cells, so a test can hand it a table with one number broken and see the claim fail.
// The constants the judges use are stated, with the reason for each, in docs/lab.md.
#pragma once

#include <cstdint>
#include <vector>

#include "lab/stats.hpp"
#include "lab/table.hpp"

namespace sdpa::lab {

/// What a run of an experiment is given. dists and max_dk are the variance sweep's only
/// (the registry says which experiments take them).
struct Settings {
  std::uint64_t seed = 1;
  std::int64_t samples = 0;  // 0: the experiment's default
  int threads = 0;
  std::vector<Dist> dists{Dist::gaussian, Dist::uniform, Dist::rademacher, Dist::student_t5};
  std::int64_t max_dk = 4096;
};

/// Claim 1: Var(q·k) = d_k for independent zero-mean unit-variance entries; 1 after /√d_k.
Table variance(const Settings& s);
/// Claim 1 (seed 003): dividing scores by c divides their variance by c².
Table scaling(const Settings& s);
/// Claim 2 (seed 000): Var(XY) = (σx²+μx²)(σy²+μy²) − μx²μy², so Var(q·k) = d_k·that.
Table general(const Settings& s);
/// Claim 3 (seeds 000/001): A (1111×111) · B (111×1111): variance ≈ 111, ≈ 1 after /√111.
Table matrix(const Settings& s);
/// Claim 4 (seeds 000/001): the 2×2 experiment that printed 1.6.
Table puzzle(const Settings& s);
/// Claim 5 (seeds 002/003): the softmax numbers the seeds quote, from the library.
Table softmax_numbers(const Settings& s);
/// Claim 6: saturation of unscaled attention against d_k, and of any attention against N.
Table saturation(const Settings& s);
/// Claim 7: which gradients vanish without scaling — w.r.t. the logits, q·k and q.
Table gradients(const Settings& s);
/// Claim 8 (seed 002's question): 1/sqrt(d_k) against 1, 1/d_k, 1/log d_k and cosine similarity.
Table alternatives(const Settings& s);
/// Claim 9 (seeds 001/002/004): projections, Xavier initialisation, LayerNorm, and where it fails.
Table projections(const Settings& s);
/// Claim 10 (ours): 1/√d_k keeps fp16/bf16 attention's rounding error independent of d_k.
Table precision(const Settings& s);
/// Claim 11 (ours): an attention sink lets a row withhold weight, but does not replace 1/√d_k.
Table sinks(const Settings& s);
/// Claim 12 (ours): an 8-bit key's score error β·q·δk stays O(1) under 1/√d_k, grows like √d_k under β = 1.
Table kvquant(const Settings& s);

// ---- the judges: claim-level verdicts from a table's cells ------------------------------

/// Saturation: unscaled attention counts as saturated when its mean entropy is below
/// this fraction of the uniform ln N and its mean largest weight p̄ makes the softmax
/// Jacobian's trace, 1 − Σp² ≤ 1 − p̄², at most the same fraction of the uniform 1 − 1/N.
inline constexpr double kSaturatedFraction = 0.2;
/// Saturation: scaled rows are compared with the largest d_k's from this d_k up; below it
/// (d_k = 1, 2) the per-query score scale ‖q‖/√d_k varies by half or more (relative sd
/// ≈ 1/√(2 d_k); 0.76 at d_k = 1), which moves the weights visibly.
inline constexpr std::int64_t kSaturationMinDk = 4;
/// Gradients: a gradient has vanished without scaling when, at the sweep's largest d_k,
/// the unscaled one is below this fraction of the scaled one.
inline constexpr double kVanishedFraction = 0.5;
/// Scaling: the worked example is exact up to rounding: two population variances of
/// three doubles, each at most 8 roundings, so 16 units of 2⁻⁵³ relative.
inline constexpr double kExampleRelTol = 16 * 0x1p-53;

/// Precision: the scaled scores' largest magnitude the bound allows for: |q·k|/√d_k of
/// standard normal entries is about N(0, 1) for d_k ≥ 16; the largest of the 64 × 64 per draw
/// is near √(2 ln 4096) ≈ 4.1, and 6 is exceeded with probability ≈ 4096 · 2e-9 ≈ 1e-5.
inline constexpr double kPrecisionScoreMax = 6.0;
/// Precision: unscaled, 16-bit scores: the error at d_k = 4096 must be at least this multiple of
/// the error at d_k = 16. The absolute score error grows like √d_k (16× over that range); the
/// softmax saturating with d_k (claim 6) damps how much of it reaches out, hence the margin.
inline constexpr double kPrecisionGrowth = 4.0;

/// Sinks: under the largest sink (σ = 8), scaled rows must keep at most this mass on the keys.
/// Scaled scores are about N(0, 1), so Σ_j e^{s_j} ≈ N·e^{1/2} ≈ 105 for N = 64 against e^8 ≈ 2981:
/// the keys keep ≈ 0.034; the bound leaves a factor 3 for the spread of ‖q‖ across draws.
inline constexpr double kSinkWithheldMass = 0.1;

/// Quantized keys: each row's rms score error must match β·√(E‖q‖²·E[δk²]) within this
/// fraction. The mean square is over T·64 = 16384 scores per row, each the square of a sum of
/// d_k independent terms: its relative standard error is about √(2/16384) ≈ 1.1 %, so 5 % is
/// over 4 standard errors; the cross terms q_d q_d' δk_d δk_d' average to zero at the same rate.
inline constexpr double kQuantScoreAgreement = 0.05;
/// Quantized keys, scaled: the score error may grow at most this much from d_k = 16 to 256.
/// int8's step is max|k_row|/127 and the largest of d_k normals grows like √(2 ln 2d_k) (2.6 at
/// 16, 3.5 at 256: ×1.34); fp8's error is relative to each element and does not grow. Unscaled
/// errors grow √16 = 4 times more over the same sweep.
inline constexpr double kQuantScaledGrowth = 2.0;

/// Tables judged row by row: holds when every row's verdict cell says "holds",
/// else fails "in K of N rows".
Verdict judge_variance(const Table& t);
Verdict judge_scaling(const Table& t);
Verdict judge_general(const Table& t);
Verdict judge_matrix(const Table& t);
Verdict judge_puzzle(const Table& t);
Verdict judge_softmax(const Table& t);
/// Claim-level rules, each stated in its experiment's file and in docs/lab.md.
Verdict judge_saturation(const Table& t);
Verdict judge_gradients(const Table& t);
Verdict judge_alternatives(const Table& t);
Verdict judge_projections(const Table& t);
Verdict judge_precision(const Table& t);
Verdict judge_sinks(const Table& t);
Verdict judge_kvquant(const Table& t);

}  // namespace sdpa::lab
