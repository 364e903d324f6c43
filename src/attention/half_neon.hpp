// half_neon.hpp — 4-lane loads and stores of bf16 and fp16 for the neon path: widen on load,
// round to nearest even on store; the arithmetic stays fp32. Included inside the ISA's
// namespace (sdpa::detail::neon) after <arm_neon.h>, like simd_neon.hpp. fp16 takes the
// base ARMv8 conversions (fcvtl, fcvtn: round to nearest even, Linux's default FPCR); bf16
// needs no instruction beyond shifts (BFCVT is an optional extension).

// bf16 -> float is a 16-bit shift: each value widened to 32 bits and moved up (ushll #16).
inline float32x4_t load4_bf16(const bf16* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p)), 16));
}

inline float32x4_t load4_fp16(const fp16* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p))));
}

inline void store4_fp16(fp16* p, float32x4_t x) {
  vst1_u16(reinterpret_cast<std::uint16_t*>(p), vreinterpret_u16_f16(vcvt_f16_f32(x)));
}

// bf16::from_float's integer rounding on 4 lanes (add 0x7FFF plus the lowest kept bit, keep
// the top half), NaN lanes made quiet instead (half_avx2.hpp's, lane for lane).
inline void store4_bf16(bf16* p, float32x4_t x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t rounded = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), lsb));
  const uint32x4_t quiet = vorrq_u32(u, vdupq_n_u32(0x400000));
  const uint32x4_t is_num = vceqq_f32(x, x);
  vst1_u16(reinterpret_cast<std::uint16_t*>(p), vshrn_n_u32(vbslq_u32(is_num, rounded, quiet), 16));
}
