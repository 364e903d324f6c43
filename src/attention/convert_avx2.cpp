// convert_avx2.cpp — bulk bf16/fp16 conversion for the avx2 path: convert_kernel.inl on the
// 8-lane helpers of half_avx2.hpp, and the 8-bit KV encoder, compiled with the ISA's flags
// (src/CMakeLists.txt).
#include <immintrin.h>

#include <cstdint>

#include "attention/convert.hpp"
#include "attention/quantize.hpp"

namespace sdpa::detail::avx2 {
#include "attention/half_avx2.hpp"

namespace {

// Four codes of x[0..4) / scale as int32: convert_avx512.cpp's codes8 without getexp and scalef
// (E from the double's exponent bits, 2^(3−E) built from bits) and without embedded rounding:
// vcvtpd2dq rounds as MXCSR says, to nearest even unless changed, as the scalar round_even does.
template <KvQuant Q>
__m128i codes4(const float* x, __m256d scale, __m256d top) {
  __m256d v = _mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(x)), scale);
  v = _mm256_min_pd(_mm256_max_pd(v, _mm256_sub_pd(_mm256_setzero_pd(), top)), top);
  if constexpr (Q == KvQuant::int8) {
    return _mm256_cvtpd_epi32(v);
  } else {
    const __m256d a = _mm256_andnot_pd(_mm256_set1_pd(-0.0), v);
    // E + 1023, at least 1017 (E = −6) and at most 1031 (|v| ≤ 448): each 64-bit lane's high half
    // is 0, so the 32-bit max is the 64-bit one
    const __m256i biased = _mm256_max_epi32(_mm256_srli_epi64(_mm256_castpd_si256(a), 52), _mm256_set1_epi64x(1017));
    const __m256d step = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_sub_epi64(_mm256_set1_epi64x(2049), biased), 52));
    const __m128i q = _mm256_cvtpd_epi32(_mm256_mul_pd(a, step));  // |v| · 2^(3−E): exact
    const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m128i exponent = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(biased, low_halves));
    const __m128i code = _mm_add_epi32(_mm_slli_epi32(_mm_sub_epi32(exponent, _mm_set1_epi32(1017)), 3), q);
    const __m256i negative64 = _mm256_castpd_si256(_mm256_cmp_pd(v, _mm256_setzero_pd(), _CMP_LT_OQ));
    const __m128i negative = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(negative64, low_halves));
    const __m128i signed_nonzero = _mm_and_si128(negative, _mm_cmpgt_epi32(code, _mm_setzero_si128()));
    return _mm_or_si128(code, _mm_and_si128(signed_nonzero, _mm_set1_epi32(0x80)));
  }
}

template <KvQuant Q>
i64 encode16s(const float* x, i64 n, float scale, std::uint8_t* codes) {
  const __m256d s = _mm256_set1_pd(scale), top = _mm256_set1_pd(code_max(Q));
  i64 i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i c0 = codes4<Q>(x + i, s, top), c1 = codes4<Q>(x + i + 4, s, top);
    const __m128i c2 = codes4<Q>(x + i + 8, s, top), c3 = codes4<Q>(x + i + 12, s, top);
    const __m128i lo = _mm_packs_epi32(c0, c1), hi = _mm_packs_epi32(c2, c3);  // |code| ≤ 254: exact in int16
    // int8's codes signed, e4m3's bytes 0..254 unsigned: each pack saturates nothing
    const __m128i bytes = Q == KvQuant::int8 ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), bytes);
  }
  return i;
}

float quantize_row16(KvQuant q, const float* x, i64 n, std::uint8_t* codes) {
  const auto vector_max = [&](i64& i) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 most = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) most = _mm256_max_ps(most, _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
  };
  return quantize_row_with(q, x, n, codes, vector_max, [&](auto format, float scale) {
    return encode16s<decltype(format)::value>(x, n, scale, codes);
  });
}

}  // namespace

struct HalfVec {
  static constexpr i64 kLanes = 8;
  static void widen(const bf16* src, float* dst) { _mm256_storeu_ps(dst, load8_bf16(src)); }
  static void widen(const fp16* src, float* dst) { _mm256_storeu_ps(dst, load8_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store8_bf16(dst, _mm256_loadu_ps(src)); }
  static void narrow(const float* src, fp16* dst) { store8_fp16(dst, _mm256_loadu_ps(src)); }
  static constexpr auto quantize_row = &quantize_row16;
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::avx2

namespace sdpa::detail {
const ConvertKernels& convert_kernels_avx2() { return avx2::convert_table(); }
}  // namespace sdpa::detail
