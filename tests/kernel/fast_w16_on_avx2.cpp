// fast_w16_on_avx2.cpp — for tests only: the tiled kernel and the fused decoding loop
// compiled as fast_avx512.cpp compiles them, on the W = 16 `Vec` of simd_w16_on_avx2.hpp
// (pairs of AVX2 registers), so the AVX-512 path's kernel logic runs on AVX2 CPUs. Built
// into the kernel tests only, with the AVX2 flags (tests/kernel/CMakeLists.txt); the tests
// reach it through detail::set_kernels_for_tests (util.hpp, kernel_variants).
#include <immintrin.h>

#include <cstdint>

#include "attention/fast.hpp"
#include "attention/quantize.hpp"

#define SDPA_FUSED_DECODE 1  // kernel/forward.inl sends decoding items to decode::forward, as on AVX-512

namespace sdpa::detail::w16 {

// The converters of 16-bit tensors (kernel/common.inl): AVX2's. They convert element by
// element (exact widening, one rounding to nearest even), so their results do not depend on
// the width; test_half.cpp checks every ISA's against the scalar ones.
constexpr Isa kIsa = Isa::avx2;
#include "simd_w16_on_avx2.hpp"

namespace decode {

// isa_avx512.hpp's Ops, lane for lane, on the W = 16 Vec.
struct Ops {
  using Mask = std::uint16_t;                 // bit e: float e of a vector is read
  static constexpr int kGroupLanes = 4;       // 4 lanes × 4 keys per score vector
  static constexpr bool kThreeLanes = true;   // as AVX-512's
  static constexpr int kPvAccumulators = 16;  // AVX-512's count (of 32 registers)
  static constexpr int kPvTwoLaneVectors = 4;  // AVX-512's
  static constexpr int kPvTwoLaneCodeVectors = 8;  // AVX-512's

  static Mask full_mask() { return 0xFFFF; }
  static Mask part_mask(i64 n) { return static_cast<Mask>((1u << n) - 1); }  // the first n floats, 0 < n < 16
  static Vec::R load(const float* x) { return Vec::load(x); }
  static Vec::R load(const bf16* x) { return load16_bf16(x); }
  static Vec::R load(const fp16* x) { return load16_fp16(x); }
  // The floats under m, zeros past them, no byte past them read (as vmaskmovps and
  // AVX-512's masked loads).
  static Vec::R load_part(const float* x, Mask m) {
    const __m256i lo = _mm256_castps_si256(Vec::lanes_of(m, 0)), hi = _mm256_castps_si256(Vec::lanes_of(m, 1));
    return {_mm256_maskload_ps(x, lo), (m >> 8) == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(x + 8, hi)};
  }
  // 16-bit: through a zeroed copy of the elements under m (a prefix: part_mask's).
  template <class E>
  static Vec::R load_part(const E* x, Mask m) {
    E tail[16];
    __builtin_memset(tail, 0, sizeof tail);
    __builtin_memcpy(tail, x, static_cast<unsigned>(__builtin_popcount(m)) * sizeof(E));
    return load(tail);
  }
  static float to_float(float x) { return x; }
  static float to_float(bf16 x) { return __builtin_bit_cast(float, static_cast<unsigned>(x.bits) << 16); }
  static float to_float(fp16 x) { return _cvtsh_ss(x.bits); }
  // A quantized cache's bytes, eight at a time as isa_avx2.hpp's.
  static __m256 half_i8(const void* x) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(x))));
  }
  static __m256 half_e4m3(const void* x) {
    const __m128i w = _mm_slli_epi16(_mm_cvtepi8_epi16(_mm_loadl_epi64(static_cast<const __m128i*>(x))), 7);
    return _mm256_cvtph_ps(_mm_and_si128(w, _mm_set1_epi16(static_cast<short>(0xBFFF))));
  }
  static Vec::R load(const I8Code* x) { return {half_i8(x), half_i8(x + 8)}; }
  static Vec::R load(const E4M3Code* x) { return {half_e4m3(x), half_e4m3(x + 8)}; }
  static float to_float(I8Code x) { return static_cast<float>(x.bits); }
  static float to_float(E4M3Code x) {  // as the vector loads: the byte in an fp16's bits, value × 2^-8
    return to_float(
        __builtin_bit_cast(fp16, static_cast<std::uint16_t>(((x.bits & 0x80) << 8) | ((x.bits & 0x7F) << 7))));
  }
  template <int KB>
  static Vec::R load_keys(const float* p) {
    static_assert(KB == 4 || KB == 8 || KB == 16);
    if constexpr (KB == 16) return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    if constexpr (KB == 8) return {_mm256_loadu_ps(p), _mm256_loadu_ps(p)};
    const __m256 x = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
    return {x, x};
  }

  // _mm512_unpacklo/hi_ps, _mm512_shuffle_ps and _mm512_permute_ps act within 128-bit lanes:
  // their AVX2 forms on each half are the same operation.
  static Vec::R unpacklo(Vec::R a, Vec::R b) {
    return {_mm256_unpacklo_ps(a.lo, b.lo), _mm256_unpacklo_ps(a.hi, b.hi)};
  }
  static Vec::R unpackhi(Vec::R a, Vec::R b) {
    return {_mm256_unpackhi_ps(a.lo, b.lo), _mm256_unpackhi_ps(a.hi, b.hi)};
  }
  template <int IMM>
  static Vec::R shuffle(Vec::R a, Vec::R b) {
    return {_mm256_shuffle_ps(a.lo, b.lo, IMM), _mm256_shuffle_ps(a.hi, b.hi, IMM)};
  }
  template <int IMM>
  static Vec::R permute(Vec::R a) {
    return {_mm256_permute_ps(a.lo, IMM), _mm256_permute_ps(a.hi, IMM)};
  }

  // a[0..15] -> one vector whose element e is the sum of a[e]'s elements: isa_avx512.hpp's
  // steps.
  static Vec::R reduce_all(const Vec::R* a) {
    Vec::R t[8], u[4];
    for (int i = 0; i < 8; ++i) t[i] = Vec::add(unpacklo(a[2 * i], a[2 * i + 1]), unpackhi(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; ++i)
      u[i] = Vec::add(shuffle<0x44>(t[2 * i], t[2 * i + 1]), shuffle<0xEE>(t[2 * i], t[2 * i + 1]));
    const Vec::R s0 = Vec::add(Vec::shuffle_f32x4(u[0], u[1], 0x88), Vec::shuffle_f32x4(u[0], u[1], 0xDD));
    const Vec::R s1 = Vec::add(Vec::shuffle_f32x4(u[2], u[3], 0x88), Vec::shuffle_f32x4(u[2], u[3], 0xDD));
    return Vec::add(Vec::shuffle_f32x4(s0, s1, 0x88), Vec::shuffle_f32x4(s0, s1, 0xDD));
  }

  // Max (or sum) over aligned groups of G consecutive elements, in every element of the group.
  template <int G, bool MAX>
  static Vec::R group_reduce(Vec::R x) {
    static_assert(G >= 4 && G <= 16);
    auto op = [](Vec::R a, Vec::R b) {
      return MAX ? Vec::R{_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)} : Vec::add(a, b);
    };
    x = op(x, permute<0xB1>(x));
    x = op(x, permute<0x4E>(x));
    if constexpr (G >= 8) x = op(x, Vec::shuffle_f32x4(x, x, 0xB1));
    if constexpr (G >= 16) x = op(x, Vec::shuffle_f32x4(x, x, 0x4E));
    return x;
  }

  // x with -inf where key jb + c[e] lies outside [lo[e], hi[e]].
  static Vec::R hide_outside(Vec::R x, int jb, const int* c, const int* lo, const int* hi) {
    auto half = [&](__m256 xh, int e0) {
      auto load = [&](const int* v) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + e0)); };
      const __m256i j = _mm256_add_epi32(_mm256_set1_epi32(jb), load(c));
      const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(load(lo), j), _mm256_cmpgt_epi32(j, load(hi)));
      return _mm256_blendv_ps(xh, _mm256_set1_ps(-__builtin_inff()), _mm256_castsi256_ps(out));
    };
    return {half(x.lo, 0), half(x.hi, 8)};
  }

  static bool any_nan(Vec::R x) {
    return (_mm256_movemask_ps(_mm256_cmp_ps(x.lo, x.lo, _CMP_UNORD_Q)) |
            _mm256_movemask_ps(_mm256_cmp_ps(x.hi, x.hi, _CMP_UNORD_Q))) != 0;
  }

  static Vec::R pin(Vec::R x) {  // as isa_avx512.hpp's: the loaded vector kept in registers
    __asm__("" : "+x"(x.lo), "+x"(x.hi));
    return x;
  }
  static Vec::R pin_query(Vec::R x) { return pin(x); }
};

}  // namespace decode

#include "attention/kernel/kernel.inl"

// The bulk converters as convert_avx512.cpp builds them (16 values per vector, then the
// scalar tail), for test_half.cpp: the kernel above calls AVX2's (kIsa).
struct HalfVec {
  static constexpr i64 kLanes = W;
  static void widen(const bf16* src, float* dst) { Vec::store(dst, load16_bf16(src)); }
  static void widen(const fp16* src, float* dst) { Vec::store(dst, load16_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store16_bf16(dst, Vec::load(src)); }
  static void narrow(const float* src, fp16* dst) { store16_fp16(dst, Vec::load(src)); }
  static constexpr auto quantize_row = &quantize_row_scalar;  // the vector 8-bit encoders are tested per ISA
};
#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::w16

namespace sdpa::detail {
const FastKernels& fast_kernels_w16_on_avx2() { return w16::table(); }
const ConvertKernels& convert_kernels_w16_on_avx2() { return w16::convert_table(); }
}  // namespace sdpa::detail
