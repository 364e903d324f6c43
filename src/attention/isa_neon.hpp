// isa_neon.hpp — the neon path's layer under the attention kernel (kernel/kernel.inl): `kIsa`,
// the vector type `Vec` of 4 floats (simd_neon.hpp), the 16-bit loads and stores
// (half_neon.hpp), and the fused decoding loop's primitives `Ops`, all in sdpa::detail::neon;
// and the kernel features this path has. Included by fast_neon.cpp only (aarch64 builds).
#pragma once

#define SDPA_FUSED_DECODE 1  // kernel/forward.inl sends decoding items to decode::forward
#define SDPA_ENGINE16 1      // and the dot engine's table, table_on<Engine16::dot> (engine16_neon.cpp)

#include <arm_neon.h>

#include <cstdint>

#include "attention/fast.hpp"

namespace sdpa::detail::neon {

constexpr Isa kIsa = Isa::neon;  // the converters of 16-bit tensors (kernel/common.inl)
#include "attention/simd_neon.hpp"
#include "attention/half_neon.hpp"

namespace decode {

struct Ops {
  using Mask = uint32x4_t;                    // all ones in the floats a partial load reads
  static constexpr int kGroupLanes = 2;       // 2 lanes × 2 keys per score vector (W / kGroupLanes >= 2)
  static constexpr bool kThreeLanes = false;  // two lanes a group
  static constexpr int kPvAccumulators = 16;  // of 32 registers: 16 + a key's V vectors + a weight
  static constexpr int kPvTwoLaneVectors = kPvAccumulators / 2;    // AVX-512 takes 4; not timed on Arm
  static constexpr int kPvTwoLaneCodeVectors = kPvTwoLaneVectors;  // the same for an 8-bit cache's codes

  static Mask full_mask() { return vdupq_n_u32(~0u); }
  static Mask part_mask(i64 n) {  // the first n floats, 0 < n < 4
    const std::uint32_t index[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(index), vdupq_n_u32(static_cast<std::uint32_t>(n)));
  }
  // The element loads (kernel/decode.inl's one seam for K and V): 4 elements of the call's
  // dtype as 4 floats, whole or the first under m (zeros past them), and one as a float.
  static float32x4_t load(const float* x) { return vld1q_f32(x); }
  static float32x4_t load(const bf16* x) { return load4_bf16(x); }  // half_neon.hpp
  static float32x4_t load(const fp16* x) { return load4_fp16(x); }
  // A quantized cache's bytes: int8 codes sign-extended (sxtl twice) and converted; e4m3 bytes
  // placed into fp16 bits (sign to bit 15, exponent and mantissa to bits 13..7: the value ×
  // 2^-8, exact) and widened by fcvtl (kernel/decode.inl, kCodeUnit), as the x86 paths do.
  static int8x8_t four_bytes(const void* x) {
    std::uint32_t w;
    __builtin_memcpy(&w, x, sizeof w);
    return vreinterpret_s8_u32(vdup_n_u32(w));
  }
  static float32x4_t load(const I8Code* x) { return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(four_bytes(x))))); }
  static float32x4_t load(const E4M3Code* x) {
    const int16x4_t w = vshl_n_s16(vget_low_s16(vmovl_s8(four_bytes(x))), 7);  // sign-extended: bits 15, 14 if < 0
    return vcvt_f32_f16(vreinterpret_f16_s16(vand_s16(w, vdup_n_s16(static_cast<std::int16_t>(0xBFFF)))));
  }
  // NEON has no masked load: a partial vector (a row's tail, Dk or Dv not a multiple of 4)
  // goes through a zeroed copy of the elements under m, so nothing past the row is read.
  template <class E>
  static float32x4_t load_part(const E* x, Mask m) {
    const std::uint32_t n = vaddvq_u32(vshrq_n_u32(m, 31));
    if (n == 4) return load(x);
    E tail[4];
    __builtin_memset(static_cast<void*>(tail), 0, sizeof tail);
    __builtin_memcpy(static_cast<void*>(tail), x, n * sizeof(E));
    return load(tail);
  }
  static float to_float(float x) { return x; }
  static float to_float(bf16 x) { return __builtin_bit_cast(float, static_cast<unsigned>(x.bits) << 16); }
  static float to_float(fp16 x) { return static_cast<float>(__builtin_bit_cast(__fp16, x.bits)); }
  static float to_float(I8Code x) { return static_cast<float>(x.bits); }
  static float to_float(E4M3Code x) {  // as the vector loads: the byte in an fp16's bits, value × 2^-8
    return to_float(
        __builtin_bit_cast(fp16, static_cast<std::uint16_t>(((x.bits & 0x80) << 8) | ((x.bits & 0x7F) << 7))));
  }
  // KB consecutive floats at p, repeated across the vector (a score vector's per-key factors).
  template <int KB>
  static float32x4_t load_keys(const float* p) {
    if constexpr (KB == 4) return vld1q_f32(p);
    if constexpr (KB == 2) {
      const float32x2_t pair = vld1_f32(p);
      return vcombine_f32(pair, pair);
    }
    static_assert(KB == 2 || KB == 4);
  }

  // a[0..3] -> one vector whose element e is the sum of a[e]'s elements: three pairwise adds.
  static float32x4_t reduce_all(const float32x4_t* a) {
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
  }

  // Max (or sum) over aligned groups of G consecutive elements, in every element of the group.
  // The maxima come from max_ignore_nan over scores (never NaN), so fmax's NaN rule is moot.
  template <int G, bool MAX>
  static float32x4_t group_reduce(float32x4_t x) {
    static_assert(G == 2 || G == 4);
    auto op = [](float32x4_t a, float32x4_t b) { return MAX ? vmaxq_f32(a, b) : vaddq_f32(a, b); };
    x = op(x, vrev64q_f32(x));                            // pairs (0 1) (2 3)
    if constexpr (G == 4) x = op(x, vextq_f32(x, x, 2));  // halves
    return x;
  }

  // x with -inf where key jb + c[e] lies outside [lo[e], hi[e]].
  static float32x4_t hide_outside(float32x4_t x, int jb, const int* c, const int* lo, const int* hi) {
    const int32x4_t j = vaddq_s32(vdupq_n_s32(jb), vld1q_s32(c));
    const uint32x4_t out = vorrq_u32(vcgtq_s32(vld1q_s32(lo), j), vcgtq_s32(j, vld1q_s32(hi)));
    return vbslq_f32(out, vdupq_n_f32(-__builtin_inff()), x);
  }

  static bool any_nan(float32x4_t x) { return vmaxvq_u32(vmvnq_u32(vceqq_f32(x, x))) != 0; }

  // Keeps a loaded vector in a register (as isa_avx512.hpp's: GCC would fold the load into
  // every FMA that uses it; on aarch64 it may instead re-load it per use).
  static float32x4_t pin(float32x4_t x) {
    __asm__("" : "+w"(x));
    return x;
  }
  static float32x4_t pin_query(float32x4_t x) { return pin(x); }
};

}  // namespace decode
}  // namespace sdpa::detail::neon
