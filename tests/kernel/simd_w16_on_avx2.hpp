// simd_w16_on_avx2.hpp — for tests only: the AVX-512 path's vector shape (W = 16 floats,
// a 4 × 4 register tile, 16-bit lane masks) built from pairs of AVX2 registers, so the
// kernel logic fast_avx512.cpp compiles (kernel/kernel.inl: the tile loops, common.inl,
// kernel/decode.inl at W = 16) runs on a CPU without AVX-512 (docs/design.md, "The AVX-512
// path's logic on AVX2"). Included inside namespace sdpa::detail::w16 by
// fast_w16_on_avx2.cpp, compiled with the AVX2 flags.
//
// Every operation is simd_avx2.hpp's (included below, in a namespace of its own) on each
// half, lanes 0-7 in `lo` and 8-15 in `hi`: a lane's result is the AVX2 path's, which the
// test grids already hold to the tolerance rule, so what this variant adds is the code
// that depends on W and on the tile shape — tile tails, lanes per vector, kFewLanes and
// kScoreLanes, dropout's 16 Philox blocks per call, the 16-key score blocks and group
// reductions of the decoding loop, the masks of partial vectors. Where AVX-512 differs
// from AVX2 the AVX-512 semantics are kept where the kernel could see the difference:
//  - masks are 16 bits (Words::Mask, decode's Ops::Mask), as __mmask16, not lane vectors;
//  - hsum adds in _mm512_reduce_add_ps's order (the two 256-bit halves first), and
//    reduce_all / group_reduce follow isa_avx512.hpp's shuffles lane for lane (the
//    cross-128-bit steps by shuffle_f32x4 below), so sums are grouped as on AVX-512;
//  - max / min: maxps and minps return their second operand when either is NaN on both
//    ISAs (vmaxps zmm as ymm), so the halves give AVX-512's lanes;
//  - zero_where_zero: AVX-512 keeps x where p != 0 unordered, AVX2 zeroes where p == 0
//    ordered: the same lanes, NaN p included.
// What it cannot match: scale_pow2 is AVX2's exponent-field build, exact for n in
// [-126, 128] only, where AVX-512's vscalefps takes any n. simd_math.inl's exp clamps its
// argument to [-87.34, 88.72] first, so n stays in that range and both give the same bits;
// no other caller exists. The AVX-512 instructions themselves (masked loads, vscalefps,
// vcvtph2ps zmm) are not run: their use is what objdump and a run on a Zen 4 check.

namespace avx2_half {
#include "attention/simd_avx2.hpp"
#include "attention/half_avx2.hpp"
}  // namespace avx2_half

// The AVX-512 path's register tile, read from simd_avx512.hpp so the two cannot drift
// apart. Only its constants are used: none of its functions is called (or compiled) here.
// (GCC notes that its __m512 signatures would change the ABI without -mavx512f: they are
// never compiled here.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
namespace avx512_shape {
#include "attention/simd_avx512.hpp"
}  // namespace avx512_shape
#pragma GCC diagnostic pop

using Half = avx2_half::Vec;

struct Vec {
  struct R {
    Half::R lo, hi;  // lanes 0-7, 8-15
  };
  static constexpr int W = 2 * Half::W;
  static constexpr int MR = avx512_shape::Vec::MR;
  static constexpr int NV = avx512_shape::Vec::NV;
  static_assert(W == avx512_shape::Vec::W);

  static R zero() { return {Half::zero(), Half::zero()}; }
  static R set1(float x) { return {Half::set1(x), Half::set1(x)}; }
  static R load(const float* p) { return {Half::load(p), Half::load(p + Half::W)}; }
  static void store(float* p, R x) { Half::store(p, x.lo), Half::store(p + Half::W, x.hi); }
  static R add(R a, R b) { return {Half::add(a.lo, b.lo), Half::add(a.hi, b.hi)}; }
  static R sub(R a, R b) { return {Half::sub(a.lo, b.lo), Half::sub(a.hi, b.hi)}; }
  static R mul(R a, R b) { return {Half::mul(a.lo, b.lo), Half::mul(a.hi, b.hi)}; }
  static R div(R a, R b) { return {Half::div(a.lo, b.lo), Half::div(a.hi, b.hi)}; }
  static R fma(R a, R b, R c) { return {Half::fma(a.lo, b.lo, c.lo), Half::fma(a.hi, b.hi, c.hi)}; }
  static R fnma(R a, R b, R c) { return {Half::fnma(a.lo, b.lo, c.lo), Half::fnma(a.hi, b.hi, c.hi)}; }
  static R max_ignore_nan(R x, R acc) {
    return {Half::max_ignore_nan(x.lo, acc.lo), Half::max_ignore_nan(x.hi, acc.hi)};
  }
  static R max_keep_nan(R c, R x) { return {Half::max_keep_nan(c.lo, x.lo), Half::max_keep_nan(c.hi, x.hi)}; }
  static R min_keep_nan(R c, R x) { return {Half::min_keep_nan(c.lo, x.lo), Half::min_keep_nan(c.hi, x.hi)}; }
  static R zero_where_zero(R p, R x) { return {Half::zero_where_zero(p.lo, x.lo), Half::zero_where_zero(p.hi, x.hi)}; }
  static R select_lt(R x, R c, R a, R b) {
    return {Half::select_lt(x.lo, c.lo, a.lo, b.lo), Half::select_lt(x.hi, c.hi, a.hi, b.hi)};
  }
  static R select_gt(R x, R c, R a, R b) {
    return {Half::select_gt(x.lo, c.lo, a.lo, b.lo), Half::select_gt(x.hi, c.hi, a.hi, b.hi)};
  }
  static R round_nearest(R x) { return {Half::round_nearest(x.lo), Half::round_nearest(x.hi)}; }
  static R abs(R x) { return {Half::abs(x.lo), Half::abs(x.hi)}; }
  static R copysign(R mag, R sign) { return {Half::copysign(mag.lo, sign.lo), Half::copysign(mag.hi, sign.hi)}; }
  static R scale_pow2(R p, R n) { return {Half::scale_pow2(p.lo, n.lo), Half::scale_pow2(p.hi, n.hi)}; }
  static R scale_pow2_nonpositive(R p, R n) {
    return {Half::scale_pow2_nonpositive(p.lo, n.lo), Half::scale_pow2_nonpositive(p.hi, n.hi)};
  }
  static R exp(R x);              // simd_math.inl, on these primitives (as AVX-512's)
  static R exp_nonpositive(R x);  // simd_math.inl
  static R tanh(R x);             // simd_math.inl
  // _mm512_reduce_add_ps's order: the upper 256 bits added to the lower, then as AVX2's hsum
  // (upper 128 to lower, lanes 2-3 to 0-1, lane 1 to 0).
  static float hsum(R x) { return Half::hsum(_mm256_add_ps(x.hi, x.lo)); }

  // The 16 lanes' 16 mask bits (bit e: lane e) as two AVX2 lane masks, and back.
  static __m256 lanes_of(std::uint16_t bits, int half) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i b = _mm256_set1_epi32((bits >> (8 * half)) & 0xFF);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b, lane_bit), lane_bit));
  }
  static std::uint16_t bits_of(__m256 lo, __m256 hi) {
    return static_cast<std::uint16_t>(_mm256_movemask_ps(lo) | (_mm256_movemask_ps(hi) << 8));
  }
  // vshuff32x4: 128-bit lanes 0-1 of the result from a, 2-3 from b, each picked by two bits
  // of imm (Intel's definition), over the four 128-bit lanes lo.0, lo.1, hi.0, hi.1.
  static R shuffle_f32x4(R a, R b, int imm) {
    const __m128 la[4] = {_mm256_castps256_ps128(a.lo), _mm256_extractf128_ps(a.lo, 1), _mm256_castps256_ps128(a.hi),
                          _mm256_extractf128_ps(a.hi, 1)};
    const __m128 lb[4] = {_mm256_castps256_ps128(b.lo), _mm256_extractf128_ps(b.lo, 1), _mm256_castps256_ps128(b.hi),
                          _mm256_extractf128_ps(b.hi, 1)};
    return {_mm256_setr_m128(la[imm & 3], la[(imm >> 2) & 3]),
            _mm256_setr_m128(lb[(imm >> 4) & 3], lb[(imm >> 6) & 3])};
  }
};

// 16 lanes of 32-bit words: dropout's Philox (sdpa/philox.hpp's `Ops`), one block per lane,
// the decisions as a 16-bit mask (simd_avx512.hpp's __mmask16).
struct Words {
  using HalfWords = avx2_half::Words;
  struct Word {
    HalfWords::Word lo, hi;
  };
  using Mask = std::uint16_t;  // bit e: lane e kept
  static Word set1(std::uint32_t x) { return {HalfWords::set1(x), HalfWords::set1(x)}; }
  static Word load(const std::uint32_t* p) { return {HalfWords::load(p), HalfWords::load(p + Half::W)}; }
  static Word bxor(Word a, Word b) { return {HalfWords::bxor(a.lo, b.lo), HalfWords::bxor(a.hi, b.hi)}; }
  static void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    HalfWords::mulhilo(m, x.lo, hi.lo, lo.lo);
    HalfWords::mulhilo(m, x.hi, hi.hi, lo.hi);
  }
  static void halves(Word x, Word& lo, Word& hi) {
    HalfWords::halves(x.lo, lo.lo, hi.lo);
    HalfWords::halves(x.hi, lo.hi, hi.hi);
  }
  static Mask at_least(Word x, std::uint32_t t) {
    return Vec::bits_of(HalfWords::at_least(x.lo, t), HalfWords::at_least(x.hi, t));
  }
  static Vec::R select(Mask keep, Vec::R x) {  // x where kept, else 0
    return {HalfWords::select(Vec::lanes_of(keep, 0), x.lo), HalfWords::select(Vec::lanes_of(keep, 1), x.hi)};
  }
};

// 16-lane loads and stores of bf16 and fp16 (half_avx512.hpp's), as two of half_avx2.hpp's.
inline Vec::R load16_bf16(const bf16* p) { return {avx2_half::load8_bf16(p), avx2_half::load8_bf16(p + 8)}; }
inline Vec::R load16_fp16(const fp16* p) { return {avx2_half::load8_fp16(p), avx2_half::load8_fp16(p + 8)}; }
inline void store16_bf16(bf16* p, Vec::R x) { avx2_half::store8_bf16(p, x.lo), avx2_half::store8_bf16(p + 8, x.hi); }
inline void store16_fp16(fp16* p, Vec::R x) { avx2_half::store8_fp16(p, x.lo), avx2_half::store8_fp16(p + 8, x.hi); }

#include "attention/simd_math.inl"
