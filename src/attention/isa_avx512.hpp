// isa_avx512.hpp — the avx512 path's layer under the attention kernel (kernel/kernel.inl): `kIsa`,
// the vector type `Vec` of 16 floats (simd_avx512.hpp), the 16-bit loads and stores
// (half_avx512.hpp), and the fused decoding loop's primitives `Ops`, all in
// sdpa::detail::avx512; and the kernel features this path has. Included by fast_avx512.cpp
// only, which is compiled with the avx512 flags (src/CMakeLists.txt).
#pragma once

#define SDPA_FUSED_DECODE 1  // kernel/forward.inl sends decoding items to decode::forward
#define SDPA_ENGINE16 1      // and the 16-bit engines' tables, table_on<E> (engine16.hpp)

#include "attention/engine16.hpp"
#include "attention/fast.hpp"
#include "common/avx512_intrinsics.hpp"

namespace sdpa::detail::avx512 {

constexpr Isa kIsa = Isa::avx512;  // the converters of 16-bit tensors (kernel/common.inl)
#include "attention/simd_avx512.hpp"
#include "attention/half_avx512.hpp"

namespace decode {

struct Ops {
  using Mask = __mmask16;
  static constexpr int kGroupLanes = 4;       // 4 lanes × 4 keys per score vector
  static constexpr bool kThreeLanes = true;   // 3 lanes × 4 keys a vector, 4 elements unused (GQA 3, 5, 6)
  static constexpr int kPvAccumulators = 16;  // of 32 registers
  // P·V vectors a chunk with two lanes: 4 (8 accumulators), not 8; 16 accumulators and 8 V vectors
  // ran 1.15-1.40x slower (Zen 4; docs/performance.md, "Two lanes on AVX-512"). An 8-bit cache's
  // codes take 8: their chunk of 4 ran 2-5 % slower, a second pass over the weights for 16-byte rows.
  static constexpr int kPvTwoLaneVectors = 4;
  static constexpr int kPvTwoLaneCodeVectors = 8;

  static Mask full_mask() { return 0xFFFF; }
  static Mask part_mask(i64 n) { return static_cast<Mask>((1u << n) - 1); }  // the first n floats, 0 < n < 16
  // The element loads (kernel/decode.inl's one seam for K and V): 16 elements of the
  // call's dtype as 16 floats, whole or the first under m (zeros past them), and one as a float.
  static __m512 load(const float* x) { return _mm512_loadu_ps(x); }
  static __m512 load(const bf16* x) { return load16_bf16(x); }  // half_avx512.hpp
  static __m512 load(const fp16* x) { return load16_fp16(x); }
  static __m512 load_part(const float* x, Mask m) { return _mm512_maskz_loadu_ps(m, x); }
  static __m512 load_part(const bf16* x, Mask m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16));
  }
  static __m512 load_part(const fp16* x, Mask m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x)); }
  static float to_float(float x) { return x; }
  static float to_float(bf16 x) { return __builtin_bit_cast(float, static_cast<unsigned>(x.bits) << 16); }
  static float to_float(fp16 x) {  // _cvtsh_ss needs -mf16c, which the AVX-512 flags leave out
    return _mm512_cvtss_f32(_mm512_cvtph_ps(_mm256_castsi128_si256(_mm_cvtsi32_si128(x.bits))));
  }
  // A quantized cache's bytes: int8 codes sign-extended and converted; e4m3 bytes placed into
  // fp16 bits (sign to bit 15, exponent and mantissa to bits 13..7: the value × 2^-8, exact)
  // and widened as fp16 is (kernel/decode.inl, kCodeUnit).
  static __m512 from_i8(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
  static __m512 from_e4m3(__m128i b) {
    const __m256i w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);  // sign-extended: bits 15 and 14 set if < 0
    return _mm512_cvtph_ps(_mm256_and_si256(w, _mm256_set1_epi16(static_cast<short>(0xBFFF))));
  }
  static __m512 load(const I8Code* x) { return from_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }
  static __m512 load(const E4M3Code* x) { return from_e4m3(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }
  static __m512 load_part(const I8Code* x, Mask m) { return from_i8(_mm_maskz_loadu_epi8(m, x)); }
  static __m512 load_part(const E4M3Code* x, Mask m) { return from_e4m3(_mm_maskz_loadu_epi8(m, x)); }
  static float to_float(I8Code x) { return static_cast<float>(x.bits); }
  static float to_float(E4M3Code x) {  // as the vector loads: the byte in an fp16's bits, value × 2^-8
    return to_float(
        __builtin_bit_cast(fp16, static_cast<std::uint16_t>(((x.bits & 0x80) << 8) | ((x.bits & 0x7F) << 7))));
  }
  // KB consecutive floats at p, repeated across the vector (a score vector's per-key factors).
  template <int KB>
  static __m512 load_keys(const float* p) {
    if constexpr (KB == 16) return _mm512_loadu_ps(p);
    if constexpr (KB == 8)
      return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(p))));
    if constexpr (KB == 4) return _mm512_broadcast_f32x4(_mm_loadu_ps(p));
    static_assert(KB == 4 || KB == 8 || KB == 16);
  }

  // a[0..15] -> one vector whose element e is the sum of a[e]'s elements.
  static __m512 reduce_all(const __m512* a) {
    __m512 t[8], u[4];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
      t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; ++i)  // per 128-bit lane: one partial sum of each of 4 sources
      u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    const __m512 s0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    const __m512 s1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, 0x88), _mm512_shuffle_f32x4(s0, s1, 0xDD));
  }

  // Max (or sum) over aligned groups of G consecutive elements, in every element of the group.
  template <int G, bool MAX>
  static __m512 group_reduce(__m512 x) {
    static_assert(G >= 4 && G <= 16);
    auto op = [](__m512 a, __m512 b) { return MAX ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b); };
    x = op(x, _mm512_permute_ps(x, 0xB1));
    x = op(x, _mm512_permute_ps(x, 0x4E));
    if constexpr (G >= 8) x = op(x, _mm512_shuffle_f32x4(x, x, 0xB1));
    if constexpr (G >= 16) x = op(x, _mm512_shuffle_f32x4(x, x, 0x4E));
    return x;
  }

  // x with -inf where key jb + c[e] lies outside [lo[e], hi[e]].
  static __m512 hide_outside(__m512 x, int jb, const int* c, const int* lo, const int* hi) {
    const __m512i j = _mm512_add_epi32(_mm512_set1_epi32(jb), _mm512_loadu_si512(c));
    const __mmask16 out = _mm512_cmpgt_epi32_mask(_mm512_loadu_si512(lo), j) |
                          _mm512_cmpgt_epi32_mask(j, _mm512_loadu_si512(hi));
    return _mm512_mask_mov_ps(x, out, _mm512_set1_ps(-__builtin_inff()));
  }

  static bool any_nan(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0; }

  // Keeps a loaded vector in a register: without it GCC folds the load into every FMA that
  // uses the vector, and the loop becomes bound by the loads.
  static __m512 pin(__m512 x) {
    __asm__("" : "+v"(x));
    return x;
  }
  static __m512 pin_query(__m512 x) { return pin(x); }  // the score loop's queries (isa_avx2.hpp's differs)
};

}  // namespace decode
}  // namespace sdpa::detail::avx512
