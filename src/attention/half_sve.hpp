// half_sve.hpp — loads and stores of a vector's worth (Vec::W values) of bf16 and fp16 for the
// sve path, each under a predicate (the lanes read or written; the others read as 0): widen on
// load, round to nearest even on store; the arithmetic stays fp32. Each 16-bit value sits in
// the low half of its 32-bit lane (ld1h / st1h to and from .s lanes), where fcvt's half-precision
// forms read and write it. Included inside the ISA's namespace after simd_sve.hpp.

// bf16 -> float is a 16-bit shift.
inline VecF32 load_bf16(svbool_t lanes, const bf16* p) {
  const svuint32_t h = svld1uh_u32(lanes, reinterpret_cast<const std::uint16_t*>(p));
  return svreinterpret_f32_u32(svlsl_n_u32_x(all_lanes(), h, 16));
}

inline VecF32 load_fp16(svbool_t lanes, const fp16* p) {
  const svuint32_t h = svld1uh_u32(lanes, reinterpret_cast<const std::uint16_t*>(p));
  return svcvt_f32_f16_x(all_lanes(), svreinterpret_f16_u32(h));
}

inline void store_fp16(fp16* p, VecF32 x) {
  svst1h_u32(all_lanes(), reinterpret_cast<std::uint16_t*>(p), svreinterpret_u32_f16(svcvt_f16_f32_x(all_lanes(), x)));
}

// bf16::from_float's integer rounding (add 0x7FFF plus the lowest kept bit, keep the top
// half), NaN lanes made quiet instead (half_avx2.hpp's, lane for lane).
inline void store_bf16(bf16* p, VecF32 x) {
  const svbool_t all = all_lanes();
  const svuint32_t u = svreinterpret_u32_f32(x);
  const svuint32_t lsb = svand_n_u32_x(all, svlsr_n_u32_x(all, u, 16), 1);
  const svuint32_t rounded = svadd_u32_x(all, u, svadd_n_u32_x(all, lsb, 0x7FFF));
  const svuint32_t quiet = svorr_n_u32_x(all, u, 0x400000);
  const svuint32_t bits = svsel_u32(svcmpeq_f32(all, x, x), rounded, quiet);
  svst1h_u32(all, reinterpret_cast<std::uint16_t*>(p), svlsr_n_u32_x(all, bits, 16));
}
