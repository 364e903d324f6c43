// convert_neon.cpp — bulk bf16/fp16 conversion for the neon path: convert_kernel.inl on the
// 4-lane helpers of half_neon.hpp, and the 8-bit KV encoder, which the sve path takes too
// (aarch64 builds).
#include <arm_neon.h>

#include <cstdint>

#include "attention/convert.hpp"
#include "attention/quantize.hpp"

namespace sdpa::detail::neon {
#include "attention/half_neon.hpp"

namespace {

// Two codes of v (two of a row's values in double) as int64: convert_avx2.cpp's codes4 in two
// double lanes (E from the double's exponent bits); vcvtnq rounds to nearest even, as the scalar
// round_even does in the default rounding mode.
template <KvQuant Q>
int64x2_t codes2(float64x2_t v, float64x2_t scale, float64x2_t top) {
  v = vdivq_f64(v, scale);
  v = vminq_f64(vmaxq_f64(v, vnegq_f64(top)), top);
  if constexpr (Q == KvQuant::int8) {
    return vcvtnq_s64_f64(v);
  } else {
    const float64x2_t a = vabsq_f64(v);
    const uint64x2_t lowest = vdupq_n_u64(1017);  // E + 1023 at E = −6; at most 1031 (|v| ≤ 448)
    uint64x2_t biased = vshrq_n_u64(vreinterpretq_u64_f64(a), 52);
    biased = vbslq_u64(vcgtq_u64(biased, lowest), biased, lowest);
    const float64x2_t step = vreinterpretq_f64_u64(vshlq_n_u64(vsubq_u64(vdupq_n_u64(2049), biased), 52));
    const int64x2_t q = vcvtnq_s64_f64(vmulq_f64(a, step));  // |v| · 2^(3−E): exact
    const int64x2_t code = vaddq_s64(vshlq_n_s64(vreinterpretq_s64_u64(vsubq_u64(biased, lowest)), 3), q);
    const uint64x2_t signed_nonzero = vandq_u64(vcltq_f64(v, vdupq_n_f64(0.0)), vtstq_s64(code, code));
    return vorrq_s64(code, vreinterpretq_s64_u64(vandq_u64(signed_nonzero, vdupq_n_u64(0x80))));
  }
}

template <KvQuant Q>
i64 encode8s(const float* x, i64 n, float scale, std::uint8_t* codes) {
  const float64x2_t s = vdupq_n_f64(scale), top = vdupq_n_f64(code_max(Q));
  i64 i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t lo = vld1q_f32(x + i), hi = vld1q_f32(x + i + 4);
    const int64x2_t c0 = codes2<Q>(vcvt_f64_f32(vget_low_f32(lo)), s, top);
    const int64x2_t c1 = codes2<Q>(vcvt_high_f64_f32(lo), s, top);
    const int64x2_t c2 = codes2<Q>(vcvt_f64_f32(vget_low_f32(hi)), s, top);
    const int64x2_t c3 = codes2<Q>(vcvt_high_f64_f32(hi), s, top);
    const int32x4_t w0 = vcombine_s32(vmovn_s64(c0), vmovn_s64(c1)), w1 = vcombine_s32(vmovn_s64(c2), vmovn_s64(c3));
    // the narrowings keep each value's low bits: the codes (|code| ≤ 254)
    vst1_u8(codes + i, vreinterpret_u8_s8(vmovn_s16(vcombine_s16(vmovn_s32(w0), vmovn_s32(w1)))));
  }
  return i;
}

}  // namespace
}  // namespace sdpa::detail::neon

namespace sdpa::detail {
float quantize_row_neon(KvQuant q, const float* x, i64 n, std::uint8_t* codes) {
  const auto vector_max = [&](i64& i) {
    float32x4_t most = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) most = vmaxq_f32(most, vabsq_f32(vld1q_f32(x + i)));
    return vmaxvq_f32(most);
  };
  return quantize_row_with(q, x, n, codes, vector_max, [&](auto format, float scale) {
    return neon::encode8s<decltype(format)::value>(x, n, scale, codes);
  });
}
}  // namespace sdpa::detail

namespace sdpa::detail::neon {

struct HalfVec {
  static constexpr i64 kLanes = 4;
  static void widen(const bf16* src, float* dst) { vst1q_f32(dst, load4_bf16(src)); }
  static void widen(const fp16* src, float* dst) { vst1q_f32(dst, load4_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store4_bf16(dst, vld1q_f32(src)); }
  static void narrow(const float* src, fp16* dst) { store4_fp16(dst, vld1q_f32(src)); }
  static constexpr auto quantize_row = &quantize_row_neon;
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::neon

namespace sdpa::detail {
const ConvertKernels& convert_kernels_neon() { return neon::convert_table(); }
}  // namespace sdpa::detail
