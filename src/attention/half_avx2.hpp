// half_avx2.hpp — 8-lane loads and stores of bf16 and fp16 for the AVX2 path: widen on
// load, round to nearest even on store; the arithmetic stays fp32. Included inside the
// ISA's namespace (sdpa::detail::avx2) after <immintrin.h>, like simd_avx2.hpp, by every
// translation unit compiled with SDPA_AVX2_FLAGS (-mf16c among them).

// bf16 -> float is a 16-bit shift: zero-extend each value to 32 bits and move it up.
inline __m256 load8_bf16(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 load8_fp16(const fp16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// F16C's rounding with round-to-nearest-even selected: the same as fp16::from_float.
inline void store8_fp16(fp16* p, __m256 x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// AVX2 has no bf16 instruction: bf16::from_float's integer rounding on 8 lanes (add 0x7FFF
// plus the lowest kept bit, keep the top half), NaN lanes made quiet instead.
inline void store8_bf16(bf16* p, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256i r = _mm256_srli_epi32(
      _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), is_nan)), 16);
  // packus works within 128-bit lanes: [r0..r3 r0..r3 | r4..r7 r4..r7]; keep qwords 0 and 2.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0b1000);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
