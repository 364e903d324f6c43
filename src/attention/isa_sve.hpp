// isa_sve.hpp — the sve path's layer under the attention kernel (kernel/kernel.inl) for one
// vector length, SDPA_SVE_BITS (256 or 512, set by the including file): `kIsa`, the vector
// type `Vec` of SDPA_SVE_BITS / 32 floats (simd_sve.hpp), the 16-bit loads and stores
// (half_sve.hpp), and the fused decoding loop's primitives `Ops`, all in
// sdpa::detail::sve<bits>; and the kernel features this path has. Included by
// fast_sve256.cpp and fast_sve512.cpp, each compiled for its length (src/CMakeLists.txt).
//
// The decoding layout follows the x86 path of the same width (8 floats: isa_avx2.hpp's, 16:
// isa_avx512.hpp's); SVE's predicated loads read a row's tail directly, zeros past it, as
// AVX-512's masked loads do.
#pragma once

#define SDPA_FUSED_DECODE 1  // kernel/forward.inl sends decoding items to decode::forward

#include <arm_sve.h>

#include <cstdint>

#include "attention/fast.hpp"
#include "common/sve_width.hpp"  // SDPA_SVE_NAMESPACE

namespace sdpa::detail::SDPA_SVE_NAMESPACE {

constexpr Isa kIsa = Isa::sve;  // the converters of 16-bit tensors (kernel/common.inl)
#include "attention/simd_sve.hpp"
#include "attention/half_sve.hpp"

namespace decode {

struct Ops {
  using Mask = VecBool;                       // the floats a partial load reads
  static constexpr int kGroupLanes = 4;       // 4 lanes × W/4 keys per score vector (W / kGroupLanes >= 2)
  static constexpr bool kThreeLanes = true;   // 3 lanes × W/4 keys a vector, W/4 elements unused (GQA 3, 5, 6)
  static constexpr int kPvAccumulators = 16;  // of 32 registers: 16 + a key's V vectors + a weight
  static constexpr int kPvTwoLaneVectors = kPvAccumulators / 2;    // AVX-512 takes 4; not timed on Arm
  static constexpr int kPvTwoLaneCodeVectors = kPvTwoLaneVectors;  // the same for an 8-bit cache's codes

  static Mask full_mask() { return svptrue_b32(); }
  static Mask part_mask(i64 n) { return svwhilelt_b32_s64(0, n); }  // the first n floats, 0 < n < W
  // The element loads (kernel/decode.inl's one seam for K and V): W elements of the call's
  // dtype as W floats, whole or those under m (zeros past them: a predicated load reads
  // nothing past the row), and one as a float.
  static VecF32 load_part(const float* x, Mask m) { return svld1_f32(m, x); }
  static VecF32 load_part(const bf16* x, Mask m) { return load_bf16(m, x); }  // half_sve.hpp
  static VecF32 load_part(const fp16* x, Mask m) { return load_fp16(m, x); }
  // A quantized cache's bytes: int8 codes sign-extended by the load (ld1sb into .s lanes) and
  // converted; e4m3 bytes placed into fp16 bits (sign to bit 15, exponent and mantissa to bits
  // 13..7: the value × 2^-8, exact) and widened by fcvt (kernel/decode.inl, kCodeUnit), as the
  // x86 paths do. fcvt reads the low 16 bits of each lane, so the sign extension above is moot.
  static VecF32 load_part(const I8Code* x, Mask m) {
    return svcvt_f32_s32_x(all_lanes(), svld1sb_s32(m, reinterpret_cast<const std::int8_t*>(x)));
  }
  static VecF32 load_part(const E4M3Code* x, Mask m) {
    const svint32_t w = svlsl_n_s32_x(all_lanes(), svld1sb_s32(m, reinterpret_cast<const std::int8_t*>(x)), 7);
    const svint32_t h = svand_n_s32_x(all_lanes(), w, 0xBFFF);  // bit 14 (a copy of the sign) cleared
    return svcvt_f32_f16_x(all_lanes(), svreinterpret_f16_s32(h));
  }
  template <class E>
  static VecF32 load(const E* x) {
    return load_part(x, full_mask());
  }
  static float to_float(float x) { return x; }
  static float to_float(bf16 x) { return __builtin_bit_cast(float, static_cast<unsigned>(x.bits) << 16); }
  static float to_float(fp16 x) { return static_cast<float>(__builtin_bit_cast(__fp16, x.bits)); }
  static float to_float(I8Code x) { return static_cast<float>(x.bits); }
  static float to_float(E4M3Code x) {  // as the vector loads: the byte in an fp16's bits, value × 2^-8
    return to_float(
        __builtin_bit_cast(fp16, static_cast<std::uint16_t>(((x.bits & 0x80) << 8) | ((x.bits & 0x7F) << 7))));
  }
  // Lane indices, and i XOR s (a butterfly's partner) and i mod KB (a repeated block).
  static svuint32_t lane_index() { return svindex_u32(0, 1); }
  // KB consecutive floats at p, repeated across the vector (a score vector's per-key factors):
  // KB floats loaded, then each lane takes element lane mod KB (tbl).
  template <int KB>
  static VecF32 load_keys(const float* p) {
    static_assert(KB >= 2 && KB <= Vec::W && (KB & (KB - 1)) == 0);
    if constexpr (KB == Vec::W) {
      return svld1_f32(all_lanes(), p);
    } else {
      const svfloat32_t x = svld1_f32(svwhilelt_b32_s32(0, KB), p);
      return svtbl_f32(x, svand_n_u32_x(all_lanes(), lane_index(), KB - 1));
    }
  }

  // a[0..W-1] -> one vector whose element e is the sum of a[e]'s elements: log2(W) rounds of
  // pairwise adds of the even and odd elements (uzp1, uzp2) of two vectors, each round halving
  // the vectors and keeping the sources in order: W - 1 adds, 2(W - 1) permutes.
  static VecF32 reduce_all(const VecF32* a) {
    VecF32 t[Vec::W];
    for (int i = 0; i < Vec::W; ++i) t[i] = a[i];
    for (int n = Vec::W; n > 1; n /= 2)
      for (int i = 0; i < n / 2; ++i)
        t[i] = svadd_f32_x(all_lanes(), svuzp1_f32(t[2 * i], t[2 * i + 1]), svuzp2_f32(t[2 * i], t[2 * i + 1]));
    return t[0];
  }

  // Max (or sum) over aligned groups of G consecutive elements, in every element of the group:
  // a butterfly, each element combined with element i XOR s for s = 1, 2, .. G/2 (tbl). The
  // maxima come from max_ignore_nan over scores (never NaN), so fmax's NaN rule is moot.
  template <int G, bool MAX>
  static VecF32 group_reduce(VecF32 x) {
    static_assert(G >= 2 && G <= Vec::W && (G & (G - 1)) == 0);
    for (std::uint32_t s = 1; s < G; s *= 2) {
      const svfloat32_t y = svtbl_f32(x, sveor_n_u32_x(all_lanes(), lane_index(), s));
      x = MAX ? svmax_f32_x(all_lanes(), x, y) : svadd_f32_x(all_lanes(), x, y);
    }
    return x;
  }

  // x with -inf where key jb + c[e] lies outside [lo[e], hi[e]].
  static VecF32 hide_outside(VecF32 x, int jb, const int* c, const int* lo, const int* hi) {
    const svbool_t all = all_lanes();
    const svint32_t j = svadd_n_s32_x(all, svld1_s32(all, c), jb);
    const svbool_t out =
        svorr_b_z(all, svcmpgt_s32(all, svld1_s32(all, lo), j), svcmpgt_s32(all, j, svld1_s32(all, hi)));
    return svsel_f32(out, svdup_n_f32(-__builtin_inff()), x);
  }

  static bool any_nan(VecF32 x) { return svptest_any(all_lanes(), svcmpuo_f32(all_lanes(), x, x)); }

  // Keeps a loaded vector in a register (as isa_avx512.hpp's: GCC could re-load it per use).
  static VecF32 pin(VecF32 x) {
    __asm__("" : "+w"(x));
    return x;
  }
  static VecF32 pin_query(VecF32 x) { return pin(x); }
};

}  // namespace decode
}  // namespace sdpa::detail::SDPA_SVE_NAMESPACE
