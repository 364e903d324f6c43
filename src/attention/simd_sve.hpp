// simd_sve.hpp — SDPA_SVE_BITS / 32 floats per register (8 at 256 bits, 16 at 512), aarch64's
// SVE compiled for one vector length (-msve-vector-bits, src/CMakeLists.txt), 32 registers.
// Included inside namespace sdpa::detail::sve<bits> (see isa_sve.hpp) after <arm_sve.h>.
//
// ACLE's svfloat32_t has no size the compiler knows, so it cannot be a member, an array element
// or a constexpr width; the kernel needs all three (register blocks, score layouts, stack
// tiles). The arm_sve_vector_bits attribute gives the same registers a fixed size, and the
// build for that length runs only where the CPU's length is it (per_isa(), Isa::sve).
// Every operation runs under an all-true predicate; the comparisons keep the x86 paths' NaN
// rules (maxps returns its second operand when either is NaN) as a compare and a select, as
// simd_neon.hpp does, since SVE's fmax gives NaN and fmaxnm the number.
typedef svfloat32_t VecF32 __attribute__((arm_sve_vector_bits(SDPA_SVE_BITS)));
typedef svuint32_t VecU32 __attribute__((arm_sve_vector_bits(SDPA_SVE_BITS)));
typedef svint32_t VecS32 __attribute__((arm_sve_vector_bits(SDPA_SVE_BITS)));
typedef svbool_t VecBool __attribute__((arm_sve_vector_bits(SDPA_SVE_BITS)));

inline svbool_t all_lanes() { return svptrue_b32(); }

struct Vec {
  using R = VecF32;
  static constexpr int W = SDPA_SVE_BITS / 32;
  // The tiled kernel's GEMM block, as simd_neon.hpp's: 5 rows × 4 vectors = 20 accumulators,
  // + 4 B vectors + 5 A elements (each broadcast by ld1rw) of 32 registers.
  static constexpr int MR = 5;
  static constexpr int NV = 4;
  static R zero() { return svdup_n_f32(0.0f); }
  static R set1(float x) { return svdup_n_f32(x); }
  static R load(const float* p) { return svld1_f32(all_lanes(), p); }
  static void store(float* p, R x) { svst1_f32(all_lanes(), p, x); }
  static R add(R a, R b) { return svadd_f32_x(all_lanes(), a, b); }
  static R sub(R a, R b) { return svsub_f32_x(all_lanes(), a, b); }
  static R mul(R a, R b) { return svmul_f32_x(all_lanes(), a, b); }
  static R div(R a, R b) { return svdiv_f32_x(all_lanes(), a, b); }
  static R fma(R a, R b, R c) { return svmla_f32_x(all_lanes(), c, a, b); }  // a·b + c, one rounding
  // One float, fused as the vector form is (fmadd): a GEMM's column tail (nn/linear_kernel.inl).
  static float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
  static R fnma(R a, R b, R c) { return svmls_f32_x(all_lanes(), c, a, b); }  // c - a·b
  static R max_ignore_nan(R x, R acc) { return svsel_f32(svcmpgt_f32(all_lanes(), x, acc), x, acc); }
  static R max_keep_nan(R c, R x) { return svsel_f32(svcmpgt_f32(all_lanes(), c, x), c, x); }
  static R min_keep_nan(R c, R x) { return svsel_f32(svcmplt_f32(all_lanes(), c, x), c, x); }
  static R zero_where_zero(R p, R x) { return svsel_f32(svcmpeq_n_f32(all_lanes(), p, 0.0f), zero(), x); }
  static R select_lt(R x, R c, R a, R b) { return svsel_f32(svcmplt_f32(all_lanes(), x, c), a, b); }
  static R select_gt(R x, R c, R a, R b) { return svsel_f32(svcmpgt_f32(all_lanes(), x, c), a, b); }
  static R round_nearest(R x) { return svrintn_f32_x(all_lanes(), x); }  // ties to even
  static R abs(R x) { return svabs_f32_x(all_lanes(), x); }
  static R copysign(R mag, R sign) {
    const svuint32_t m = svand_n_u32_x(all_lanes(), svreinterpret_u32_f32(mag), 0x7FFFFFFFu);
    const svuint32_t s = svand_n_u32_x(all_lanes(), svreinterpret_u32_f32(sign), 0x80000000u);
    return svreinterpret_f32_u32(svorr_u32_x(all_lanes(), m, s));
  }
  // p·2^n for integral n in [-126, 128]: 2^n built in the exponent field, as 2^(n-1)·2
  // when n > 0 so the field never overflows (simd_avx2.hpp's construction). n is integral,
  // so fcvtzs's truncation is exact.
  static R scale_pow2(R p, R n) {
    const svint32_t ni = svcvt_s32_f32_x(all_lanes(), n);
    const svbool_t pos = svcmpgt_n_s32(all_lanes(), ni, 0);
    const svint32_t e = svadd_n_s32_x(all_lanes(), svsub_n_s32_m(pos, ni, 1), 127);
    const R res = mul(p, svreinterpret_f32_s32(svlsl_n_s32_x(all_lanes(), e, 23)));
    return svsel_f32(pos, add(res, res), res);
  }
  // The same for n <= 0 (exp_nonpositive's): no overflow to guard.
  static R scale_pow2_nonpositive(R p, R n) {
    const svint32_t e = svadd_n_s32_x(all_lanes(), svcvt_s32_f32_x(all_lanes(), n), 127);
    return mul(p, svreinterpret_f32_s32(svlsl_n_s32_x(all_lanes(), e, 23)));
  }
  static R exp(R x);              // simd_math.inl
  static R exp_nonpositive(R x);  // simd_math.inl: exp for x <= 0 or NaN only
  static R tanh(R x);             // simd_math.inl
  static float hsum(R x) { return svaddv_f32(all_lanes(), x); }
};
// W lanes of 32-bit words: dropout's Philox (sdpa/philox.hpp's `Ops`), one block per lane.
struct Words {
  using Word = VecU32;
  using Mask = VecBool;  // the lanes kept
  static Word set1(std::uint32_t x) { return svdup_n_u32(x); }
  static Word load(const std::uint32_t* p) { return svld1_u32(all_lanes(), p); }
  static Word bxor(Word a, Word b) { return sveor_u32_x(all_lanes(), a, b); }
  // m·x as 64-bit products: umulh gives the high words, mul the low ones.
  static void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    lo = svmul_n_u32_x(all_lanes(), x, m);
    hi = svmulh_n_u32_x(all_lanes(), x, m);
  }
  static void halves(Word x, Word& lo, Word& hi) {
    lo = svand_n_u32_x(all_lanes(), x, 0xFFFFu), hi = svlsr_n_u32_x(all_lanes(), x, 16);
  }
  static Mask at_least(Word x, std::uint32_t t) { return svcmpge_n_u32(all_lanes(), x, t); }
  static VecF32 select(Mask keep, VecF32 x) { return svsel_f32(keep, x, svdup_n_f32(0.0f)); }  // x where kept, else 0
};
#include "attention/simd_math.inl"
