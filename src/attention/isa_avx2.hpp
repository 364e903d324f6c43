// isa_avx2.hpp — the avx2 path's layer under the attention kernel (kernel/kernel.inl): `kIsa`,
// the vector type `Vec` of 8 floats (simd_avx2.hpp), the 16-bit loads and stores
// (half_avx2.hpp), and the fused decoding loop's primitives `Ops`, all in
// sdpa::detail::avx2; and the kernel features this path has. Included by fast_avx2.cpp
// only, which is compiled with the avx2 flags (src/CMakeLists.txt).
#pragma once

#define SDPA_FUSED_DECODE 1  // kernel/forward.inl sends decoding items to decode::forward

#include <immintrin.h>

#include "attention/fast.hpp"

namespace sdpa::detail::avx2 {

constexpr Isa kIsa = Isa::avx2;  // the converters of 16-bit tensors (kernel/common.inl)
#include "attention/simd_avx2.hpp"
#include "attention/half_avx2.hpp"

namespace decode {

struct Ops {
  using Mask = __m256i;                      // all ones in the floats a partial load reads
  static constexpr int kGroupLanes = 4;      // 4 lanes × 2 keys per score vector (docs/performance.md)
  static constexpr bool kThreeLanes = true;  // 3 lanes × 2 keys a vector, 2 elements unused (GQA 3, 5, 6)
  static constexpr int kPvAccumulators = 8;  // of 16 registers: 8 + a key's V vectors + a weight
  static constexpr int kPvTwoLaneVectors = kPvAccumulators / 2;    // P·V vectors a chunk with two lanes
  static constexpr int kPvTwoLaneCodeVectors = kPvTwoLaneVectors;  // the same for an 8-bit cache's codes

  static Mask full_mask() { return _mm256_set1_epi32(-1); }
  static Mask part_mask(i64 n) {  // the first n floats, 0 < n < 8
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // The element loads (kernel/decode.inl's one seam for K and V): 8 elements of the call's
  // dtype as 8 floats, whole or the first under m (zeros past them), and one as a float.
  static __m256 load(const float* x) { return _mm256_loadu_ps(x); }
  static __m256 load(const bf16* x) { return load8_bf16(x); }  // half_avx2.hpp
  static __m256 load(const fp16* x) { return load8_fp16(x); }
  static __m256 load_part(const float* x, Mask m) { return _mm256_maskload_ps(x, m); }
  // bf16, fp16: AVX2 has no 16-bit masked load, so a partial vector (a row's tail) goes
  // through a zeroed copy. The P·V loop passes its last vector under a full mask when Dv is
  // whole vectors: that one is loaded directly (through the copy, the store-to-load
  // forwarding stall made the loop 2x slower).
  template <class E>
  static __m256 load_part(const E* x, Mask m) {
    const unsigned bits = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(m)));
    if (bits == 0xFF) return load(x);
    const int n = __builtin_popcount(bits);
    E tail[8];
    __builtin_memset(tail, 0, sizeof tail);
    __builtin_memcpy(tail, x, static_cast<unsigned>(n) * sizeof(E));
    return load(tail);
  }
  static float to_float(float x) { return x; }
  static float to_float(bf16 x) { return __builtin_bit_cast(float, static_cast<unsigned>(x.bits) << 16); }
  static float to_float(fp16 x) { return _cvtsh_ss(x.bits); }
  // A quantized cache's bytes: int8 codes sign-extended and converted; e4m3 bytes placed into
  // fp16 bits (sign to bit 15, exponent and mantissa to bits 13..7: the value × 2^-8, exact)
  // and widened by F16C (kernel/decode.inl, kCodeUnit). Partial vectors: load_part above.
  static __m256 load(const I8Code* x) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x))));
  }
  static __m256 load(const E4M3Code* x) {
    const __m128i w = _mm_slli_epi16(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x))), 7);
    return _mm256_cvtph_ps(_mm_and_si128(w, _mm_set1_epi16(static_cast<short>(0xBFFF))));
  }
  static float to_float(I8Code x) { return static_cast<float>(x.bits); }
  static float to_float(E4M3Code x) {  // as the vector loads: the byte in an fp16's bits, value × 2^-8
    return to_float(
        __builtin_bit_cast(fp16, static_cast<std::uint16_t>(((x.bits & 0x80) << 8) | ((x.bits & 0x7F) << 7))));
  }
  // KB consecutive floats at p, repeated across the vector (a score vector's per-key factors).
  template <int KB>
  static __m256 load_keys(const float* p) {
    if constexpr (KB == 8) return _mm256_loadu_ps(p);
    if constexpr (KB == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
    if constexpr (KB == 2) {  // two floats as one 8-byte value (vbroadcastsd): at a float's alignment, so copied
      double pair;
      __builtin_memcpy(&pair, p, sizeof pair);
      return _mm256_castpd_ps(_mm256_set1_pd(pair));
    }
    static_assert(KB == 2 || KB == 4 || KB == 8);
  }

  // a[0..7] -> one vector whose element e is the sum of a[e]'s elements: 14 shuffles and
  // 7 adds, where 8 horizontal sums take 8 × 5.
  static __m256 reduce_all(const __m256* a) {
    __m256 t[4], u[2];
    for (int i = 0; i < 4; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
      t[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 2; ++i)  // per 128-bit lane: one partial sum of each of 4 sources
      u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                           _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
  }

  // Max (or sum) over aligned groups of G consecutive elements, in every element of the group.
  template <int G, bool MAX>
  static __m256 group_reduce(__m256 x) {
    static_assert(G >= 2 && G <= 8);
    auto op = [](__m256 a, __m256 b) { return MAX ? _mm256_max_ps(a, b) : _mm256_add_ps(a, b); };
    x = op(x, _mm256_permute_ps(x, 0xB1));
    if constexpr (G >= 4) x = op(x, _mm256_permute_ps(x, 0x4E));
    if constexpr (G >= 8) x = op(x, _mm256_permute2f128_ps(x, x, 0x01));
    return x;
  }

  // x with -inf where key jb + c[e] lies outside [lo[e], hi[e]].
  static __m256 hide_outside(__m256 x, int jb, const int* c, const int* lo, const int* hi) {
    auto load = [](const int* v) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)); };
    const __m256i j = _mm256_add_epi32(_mm256_set1_epi32(jb), load(c));
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(load(lo), j), _mm256_cmpgt_epi32(j, load(hi)));
    return _mm256_blendv_ps(x, _mm256_set1_ps(-__builtin_inff()), _mm256_castsi256_ps(out));
  }

  static bool any_nan(__m256 x) { return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0; }

  // Keeps a loaded vector in a register (as isa_avx512.hpp's: GCC would fold the load
  // into every FMA that uses it).
  static __m256 pin(__m256 x) {
    __asm__("" : "+x"(x));
    return x;
  }
  // The score loop's query vectors are not pinned: with 4 lanes × 2 keys, 8 accumulators, 4
  // pinned queries and 2 keys fill 14 of 16 registers, and the 4 query loads are a quarter of
  // each step's instructions. Folded into the FMAs (each query read by the block's 2 keys),
  // the int8 cache's step ran 5 % faster on Zen 3, the others unchanged within noise
  // (docs/performance.md, "Decoding from an 8-bit KV cache").
  static __m256 pin_query(__m256 x) { return x; }
};

}  // namespace decode
}  // namespace sdpa::detail::avx2
