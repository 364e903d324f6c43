// kvquant.cpp — claim 12 (ours): what the temperature does to the error of an 8-bit key cache.
// A key stored as code × scale is off by δk, and its score by β·q·δk: with independent rounding
// errors of mean square E[δk²], that is β·‖q‖·√E[δk²] ≈ β·√d_k·√E[δk²] in rms. With β = 1/√d_k the
// score error stays O(1) whatever d_k; with β = 1 it grows like √d_k. Measured with the library:
// keys and values quantized by sdpa::quantize_kv, the scores of the dequantized keys from the
// float kernel (probe.hpp's scores_all), and the attention weights from forward_kvcache reading
// the codes themselves (values = the identity, so out is the row of weights).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <fmt/core.h>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "sdpa/error.hpp"
#include "sdpa/kvcache.hpp"

namespace sdpa::lab {
namespace {

constexpr std::int64_t kKeys = 64;

struct Quantized {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales, values;  // values: code × scale, the cache's dequantized elements
};

// x (T, N, 1, W) quantized row by row: the layout of a contiguous cache of T sequences, one kv head.
Quantized quantize(const std::vector<float>& x, std::int64_t T, std::int64_t W, KvQuant quant) {
  Quantized r{std::vector<std::uint8_t>(x.size()), std::vector<float>(static_cast<std::size_t>(T * kKeys)),
              std::vector<float>(x.size())};
  const auto codes = contiguous(r.codes.data(), {T, kKeys, 1, W});
  const auto scales = contiguous(r.scales.data(), {T, 1, kKeys});
  quantize_kv(contiguous<const float>(x.data(), {T, kKeys, 1, W}), quant, codes, scales);
  dequantize_kv(codes, scales, quant, contiguous(r.values.data(), {T, kKeys, 1, W}));
  return r;
}

// The weights p̂[t, j] of T one-query sequences over the quantized cache: forward_kvcache reads the
// key codes, and the values are the identity rows (exact in both formats up to one rounding of
// the scale, ≤ 2⁻²³ relative: far below the key's 8-bit step), so out is the row of weights.
std::vector<double> cache_weights(const std::vector<float>& q, Quantized& k, Quantized& v, KvQuant quant,
                                  std::int64_t T, std::int64_t d, double beta, int threads) {
  std::vector<std::int32_t> seqlens(static_cast<std::size_t>(T), static_cast<std::int32_t>(kKeys));
  QuantizedKvCache cache;
  cache.quant = quant;
  cache.k = contiguous(k.codes.data(), {T, kKeys, 1, d});
  cache.v = contiguous(v.codes.data(), {T, kKeys, 1, kKeys});
  cache.k_scale = contiguous(k.scales.data(), {T, 1, kKeys});
  cache.v_scale = contiguous(v.scales.data(), {T, 1, kKeys});
  cache.seqlens = View<const std::int32_t, 1>{seqlens.data(), {T}, {1}};
  std::vector<float> out(static_cast<std::size_t>(T * kKeys));
  Options opt;
  opt.scale = beta;
  opt.threads = threads;
  forward_kvcache(contiguous<const float>(q.data(), {T, 1, 1, d}), cache, View4<const float>{}, View4<const float>{},
                  contiguous(out.data(), {T, 1, 1, kKeys}), View3<float>{}, opt);
  return {out.begin(), out.end()};
}

}  // namespace

Table kvquant(const Settings& c) {
  Table t{"kvquant",
          "random q and 64 keys (standard normal), the keys stored in 8 bits (int8 or fp8 e4m3, one scale per key): "
          "rms score error β·q·δk and the weights' total-variation error against the float keys, scaled and "
          "unscaled, against d_k",
          {"format", "d_k", "scale", "score_err", "score_err_lo", "score_err_hi", "predicted", "weight_err",
           "weight_err_lo", "weight_err_hi", "max_weight"},
          {},
          {}};
  const std::int64_t T = c.samples ? c.samples : 256;
  std::vector<float> eye(static_cast<std::size_t>(T * kKeys * kKeys), 0.0f);  // T sequences' identity values
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < kKeys; ++j) eye[static_cast<std::size_t>((t * kKeys + j) * kKeys + j)] = 1.0f;
  for (const KvQuant quant : {KvQuant::int8, KvQuant::fp8_e4m3}) {
    Quantized identity = quantize(eye, T, kKeys, quant);
    for (std::int64_t d = 16; d <= 256; d *= 2) {
      // One draw per (format, d_k): scaled and unscaled see the same q, keys and codes.
      std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(d) * 8191u +
                          static_cast<std::uint64_t>(quant));
      const auto q = gaussian(rng, T * d), k = gaussian(rng, T * kKeys * d);
      Quantized kq = quantize(k, T, d, quant);
      // The theory's rms: β·√(E‖q‖²·E[δk²]) from this draw's own q and rounding errors.
      double q2 = 0, dk2 = 0;
      for (float e : q) q2 += double(e) * e;
      for (std::size_t i = 0; i < k.size(); ++i) dk2 += std::pow(double(kq.values[i]) - k[i], 2);
      const double rms_q_dk = std::sqrt(q2 / double(T) * dk2 / double(k.size()));
      for (const bool scaled : {true, false}) {
        const double beta = scaled ? 1.0 / std::sqrt(double(d)) : 1.0;
        const auto s = scores_all(q, k, T, kKeys, d, beta, c.threads);
        const auto s_hat = scores_all(q, kq.values, T, kKeys, d, beta, c.threads);
        const auto p = weights(q, k, T, kKeys, d, beta, c.threads);
        const auto p_hat = cache_weights(q, kq, identity, quant, T, d, beta, c.threads);
        std::vector<double> square(static_cast<std::size_t>(T)), tv(square.size()), maxw(square.size());
        for (std::int64_t r = 0; r < T; ++r)
          for (std::int64_t j = 0; j < kKeys; ++j) {
            const auto i = static_cast<std::size_t>(r * kKeys + j), at = static_cast<std::size_t>(r);
            square[at] += std::pow(s_hat[i] - s[i], 2) / double(kKeys);
            tv[at] += 0.5 * std::abs(p_hat[i] - p[i]);
            maxw[at] = std::max(maxw[at], p[i]);
          }
        const Estimate ms = mean_of(square), e = mean_of(tv), w = mean_of(maxw);
        // rms = √(mean square); its interval from the mean square's (√ is monotone).
        const auto root = [](double x) { return std::sqrt(std::max(x, 0.0)); };
        t.add({kv_quant_name(quant), d, scaled ? "1/sqrt(d_k)" : "1", root(ms.value), root(ms.lo()), root(ms.hi()),
               beta * rms_q_dk, e.value, e.lo(), e.hi(), w.value});
      }
    }
  }
  t.verdict = judge_kvquant(t);
  return t;
}

// Holds when, for each format: (a) every row's measured rms score error is the theory's
// β·√(E‖q‖²·E[δk²]) within kQuantScoreAgreement (the keys' rounding errors are independent of q);
// (b) scaled, it grows at most kQuantScaledGrowth-fold from the smallest to the largest d_k; (c) the
// unscaled growth is √(d_max/d_min) times the scaled growth, within kQuantScoreAgreement (β = 1
// multiplies the same draw's error by √d_k).
Verdict judge_kvquant(const Table& t) {
  if (t.rows.empty()) throw Error("kvquant: the table has no rows");
  struct Ends {
    double d_min = 0, d_max = 0, at_min = 0, at_max = 0;
  };
  std::map<std::string, Ends> scaled, unscaled;  // by format
  double worst_agreement = 0, worst_scaled_growth = 0, worst_ratio_off = 0;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const double d = t.number(r, "d_k"), err = t.number(r, "score_err"), pred = t.number(r, "predicted");
    if (!(pred > 0)) throw Error("kvquant: a row has no predicted error");
    worst_agreement = std::max(worst_agreement, std::abs(err / pred - 1));
    Ends& e = (t.text(r, "scale") == "1" ? unscaled : scaled)[t.text(r, "format")];
    if (e.d_min == 0 || d < e.d_min) e.d_min = d, e.at_min = err;
    if (d > e.d_max) e.d_max = d, e.at_max = err;
  }
  if (scaled.empty() || scaled.size() != unscaled.size())
    throw Error("kvquant: the table lacks the scaled or the unscaled sweep of a format");
  std::string growth_text;
  for (const auto& [format, s] : scaled) {
    const auto u = unscaled.find(format);
    if (u == unscaled.end() || s.d_min == s.d_max) throw Error("kvquant: format " + format + " lacks a sweep");
    const double g_scaled = s.at_max / s.at_min, g_unscaled = u->second.at_max / u->second.at_min;
    const double expected_ratio = std::sqrt(s.d_max / s.d_min);
    worst_scaled_growth = std::max(worst_scaled_growth, g_scaled);
    worst_ratio_off = std::max(worst_ratio_off, std::abs(g_unscaled / g_scaled / expected_ratio - 1));
    growth_text += fmt::format("{}{}: scaled ×{:.2f}, unscaled ×{:.2f} from d_k = {:g} to {:g}",
                               growth_text.empty() ? "" : "; ", format, g_scaled, g_unscaled, s.d_min, s.d_max);
  }
  const bool agrees = worst_agreement <= kQuantScoreAgreement, flat = worst_scaled_growth <= kQuantScaledGrowth,
             grows = worst_ratio_off <= kQuantScoreAgreement;
  Verdict v;
  v.outcome = agrees && flat && grows ? Outcome::holds : Outcome::fails;
  if (!agrees) v.scope = "the score error is not β·√(E‖q‖²·E[δk²])";
  if (!flat) v.scope += std::string(v.scope.empty() ? "" : "; ") + "scaled: the score error grew with d_k";
  if (!grows) v.scope += std::string(v.scope.empty() ? "" : "; ") + "unscaled: the score error did not grow like √d_k";
  v.measured = fmt::format("rms score error {}; every row within {:.1f} % of β·√(E‖q‖²·E[δk²])", growth_text,
                           100 * worst_agreement);
  v.tolerance = fmt::format(
      "each row's rms score error within {:g} % of the theory; scaled growth over the d_k sweep ≤ ×{:g}; unscaled "
      "growth / scaled growth = √(d_max/d_min) within {:g} %",
      100 * kQuantScoreAgreement, kQuantScaledGrowth, 100 * kQuantScoreAgreement);
  return v;
}

}  // namespace sdpa::lab
