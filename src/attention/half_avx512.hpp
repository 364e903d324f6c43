// half_avx512.hpp — 16-lane loads and stores of bf16 and fp16 for the AVX-512 path: widen
// on load, round to nearest even on store; the arithmetic stays fp32. Included inside the
// ISA's namespace (sdpa::detail::avx512) after <immintrin.h>, like simd_avx512.hpp.
// vcvtneps2bf16 (AVX512_BF16) is not used for the store: it flushes subnormals to zero,
// which bf16::from_float does not; convert_avx512bf16.cpp holds it for the kernel's P.

inline __m512 load16_bf16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __m512 load16_fp16(const fp16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline void store16_fp16(fp16* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline void store16_bf16(bf16* p, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, is_nan, u, _mm512_set1_epi32(0x400000));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}
