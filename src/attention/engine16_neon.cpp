// engine16_neon.cpp — engine16.hpp's dot:: GEMM and its packings on aarch64: the GEMM by
// BFDOT (FEAT_BF16, the hwcap2 BF16), the packings in plain C++. The only aarch64 file
// compiled with +bf16 (src/CMakeLists.txt); called only where the dispatch chose the dot
// engine for the neon path (select_dispatch: the CPU has BF16 and SDPA_BF16_DOT=1). amx:: is
// x86's alone (engine16_absent.cpp). Names with weak linkage stay in sdpa::detail::engine16
// (kernel.isa_objects_share_no_inline_code).
//
// The packings are engine16.hpp's layouts element by element: each output element is one
// load, one rounding at most, and one store, so the AVX-512 versions' 16 × 16 shuffles buy
// nothing a compiler cannot vectorise here, and one plain loop per layout is the reading of
// engine16.hpp's contract that a second architecture can check. They round to bf16 by
// bf16::from_float (round to nearest even, subnormals kept: vcvtneps2bf16 flushes them, so
// the two engines' bits may differ below 2⁻¹²⁶, as their products' orders already make them).
#include <arm_neon.h>

#include <bit>
#include <cmath>

#include "attention/engine16.hpp"

namespace sdpa::detail::engine16 {
namespace {

std::uint16_t round_bf16(float x) { return bf16::from_float(x); }
float bf16_value(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
// x rounded to fp16 and back: an exact fp16 value, as the naive fp16 implementation rounds.
float fp16_value(float x) { return fp16::to_float(fp16::from_float(x)); }
// The 32-bit word of a pair: the first element in the low half.
std::uint32_t pair(std::uint16_t first, std::uint16_t second) {
  return static_cast<std::uint32_t>(first) | static_cast<std::uint32_t>(second) << 16;
}
// An fp16 value x as bf16 hi + lo: hi = x rounded, lo = x − hi (exact); lo = 0 for an infinite
// hi (±inf·y must stay ±inf, not inf − inf).
struct Split {
  std::uint16_t hi, lo;
};
Split split(float x) {
  const std::uint16_t hi = round_bf16(x);
  const float h = bf16_value(hi);
  return {hi, std::isinf(h) ? std::uint16_t{0} : round_bf16(x - h)};
}
// The block (0, 1, 2) of a split chunk that holds lo; the other two hold hi.
int lo_block(SplitOrder order) { return order == SplitOrder::hi_hi_lo ? 2 : 1; }
std::uint16_t block_bits(const Split& s, int blk, SplitOrder order) { return blk == lo_block(order) ? s.lo : s.hi; }
std::uint32_t block_pair(const Split& a, const Split& b, int blk, SplitOrder order) {
  return blk == lo_block(order) ? pair(a.lo, b.lo) : pair(a.hi, b.hi);
}
bool special(std::uint16_t bits, std::uint16_t exponent) { return (bits & exponent) == exponent; }
// Element d of row r of X (16-bit, row stride ldx), zero outside rows [0, n) × elements [0, D).
std::uint16_t bits_at(const std::uint16_t* X, i64 ldx, i64 n, i64 D, i64 r, i64 d) {
  return r < n && d < D ? X[r * ldx + d] : std::uint16_t{0};
}
const std::uint16_t* raw(const bf16* x) { return reinterpret_cast<const std::uint16_t*>(x); }
const std::uint16_t* raw(const fp16* x) { return reinterpret_cast<const std::uint16_t*>(x); }
std::uint16_t* raw(bf16* x) { return reinterpret_cast<std::uint16_t*>(x); }

}  // namespace

namespace dot {
namespace {
// C's rows [0, MR) × columns [0, 4·NV) over all of K by BFDOT: each step takes four pair rows
// k..k+3 of B (NV vectors of 4 pairs each) and, per row of A, the four pairs (A[r][2k..2k+7]) in
// one register; vbfdotq_laneq_f32 with lane l adds A's pair k+l times each lane's pair of row
// k+l: lane n gains A[r][2k']·B[2k'][n] + A[r][2k'+1]·B[2k'+1][n]. GCC loads a step's B
// registers (4·NV) and A registers (MR) before its BFDOTs, so 8 × 2 fills the 32 registers
// exactly: 16 accumulators, 8 B, 8 A, 64 BFDOTs to 16 loads and no spill. (4 × 4, the x86
// engine's shape, needs 16 B registers there: one accumulator spilled and moved every step;
// docs/performance.md, "The Arm micro-kernels".)
template <int L, int MR, int NV>
inline void dot_step(float32x4_t (&c)[MR][NV], const bfloat16x8_t (&a)[MR], const std::uint32_t* b_row) {
  bfloat16x8_t b[NV];
  for (int v = 0; v < NV; ++v) b[v] = vreinterpretq_bf16_u32(vld1q_u32(b_row + 4 * v));
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = vbfdotq_laneq_f32(c[r][v], b[v], a[r], L);
}
template <int MR, int NV>
void dot_block(i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc, bool accumulate) {
  float32x4_t c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? vld1q_f32(C + r * ldc + 4 * v) : vdupq_n_f32(0.0f);
  for (i64 k = 0; k < K / 2; k += 4) {
    bfloat16x8_t a[MR];
    for (int r = 0; r < MR; ++r) a[r] = vreinterpretq_bf16_u16(vld1q_u16(raw(A + r * lda + 2 * k)));
    dot_step<0>(c, a, B + (k + 0) * ldb);
    dot_step<1>(c, a, B + (k + 1) * ldb);
    dot_step<2>(c, a, B + (k + 2) * ldb);
    dot_step<3>(c, a, B + (k + 3) * ldb);
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) vst1q_f32(C + r * ldc + 4 * v, c[r][v]);
}
}  // namespace

void gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
          bool accumulate) {
  // Blocks of 8 rows × 8 columns: M and N are multiples of 16, K of 32 (four pair rows a step).
  for (i64 n = 0; n < N; n += 8)
    for (i64 m = 0; m < M; m += 8) dot_block<8, 2>(K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, accumulate);
}
}  // namespace dot

void pack_transposed_bf16(const float* ST, i64 rows, i64 bc, i64 kp, bf16* P, i64 ldp) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < kp; ++c) raw(P)[r * ldp + c] = c < bc ? round_bf16(ST[c * rows + r]) : std::uint16_t{0};
}

bool pack_rows_in_pairs(const bf16* V, i64 ldv, i64 n, i64 D, i64 kp, std::uint32_t* Vp, i64 ldvp) {
  const i64 dp = (D + 15) / 16 * 16;
  bool finite = true;
  for (i64 k = 0; k < kp; k += 2)
    for (i64 d = 0; d < dp; ++d) {
      const std::uint16_t a = bits_at(raw(V), ldv, n, D, k, d), b = bits_at(raw(V), ldv, n, D, k + 1, d);
      finite &= !special(a, 0x7F80) && !special(b, 0x7F80);
      Vp[k / 2 * ldvp + d] = pair(a, b);
    }
  return finite;
}

bool pack_transposed_rows(const bf16* V, i64 ldv, i64 n, i64 D, i64 kp, bf16* out, i64 ldo, std::uint16_t exponent) {
  const i64 dp = (D + 15) / 16 * 16;
  bool finite = true;
  for (i64 c = 0; c < kp; ++c)
    for (i64 e = 0; e < dp; ++e) {
      const std::uint16_t x = bits_at(raw(V), ldv, n, D, c, e);
      finite &= !special(x, exponent);
      raw(out)[e * ldo + c] = x;
    }
  return finite;
}

bool split_rows_fp16(const fp16* X, i64 ldx, i64 n, i64 D, i64 rows, i64 d32, bf16* out, i64 ldo, SplitOrder order) {
  bool finite = true;
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < d32; ++d) {
      const std::uint16_t x = bits_at(raw(X), ldx, n, D, r, d);
      finite &= !special(x, 0x7C00);
      const Split s = split(fp16::to_float(x));
      for (int blk = 0; blk < kSplitTerms; ++blk)
        raw(out)[r * ldo + d / 32 * 96 + blk * 32 + d % 32] = block_bits(s, blk, order);
    }
  return finite;
}

void pack_rows_in_pairs_f32(const float* X, i64 ldx, i64 n, i64 kp, i64 cols, std::uint32_t* out, i64 ldo) {
  for (i64 k = 0; k < kp; k += 2)
    for (i64 l = 0; l < cols; ++l) {
      const float even = k < n ? X[k * ldx + l] : 0.0f, odd = k + 1 < n ? X[(k + 1) * ldx + l] : 0.0f;
      out[k / 2 * ldo + l] = pair(round_bf16(even), round_bf16(odd));
    }
}

void pack_pairs_transposed_split(const fp16* X, i64 ldx, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo,
                                 SplitOrder order) {
  const i64 chunks = (D + 31) / 32;
  for (i64 c = 0; c < cols; ++c)
    for (i64 ch = 0; ch < chunks; ++ch)
      for (i64 k = 0; k < 16; ++k) {
        const i64 d = ch * 32 + 2 * k;
        const Split a = split(fp16::to_float(bits_at(raw(X), ldx, n, D, c, d)));
        const Split b = split(fp16::to_float(bits_at(raw(X), ldx, n, D, c, d + 1)));
        for (int blk = 0; blk < kSplitTerms; ++blk)
          out[(ch * 48 + blk * 16 + k) * ldo + c] = block_pair(a, b, blk, order);
      }
}

bool pack_rows_in_pairs_split(const fp16* V, i64 ldv, i64 n, i64 D, i64 kp, std::uint32_t* Vp, i64 ldvp,
                              SplitOrder order) {
  const i64 dp = (D + 15) / 16 * 16;
  bool finite = true;
  for (i64 k = 0; k < kp; k += 2) {
    std::uint32_t* chunk = Vp + ((k / 32) * 48 + (k % 32) / 2) * ldvp;  // the chunk's first pair row
    for (i64 e = 0; e < dp; ++e) {
      const std::uint16_t x = bits_at(raw(V), ldv, n, D, k, e), y = bits_at(raw(V), ldv, n, D, k + 1, e);
      finite &= !special(x, 0x7C00) && !special(y, 0x7C00);
      const Split a = split(fp16::to_float(x)), b = split(fp16::to_float(y));
      for (int blk = 0; blk < kSplitTerms; ++blk) chunk[blk * 16 * ldvp + e] = block_pair(a, b, blk, order);
    }
  }
  return finite;
}

void pack_transposed_bf16_split(const float* ST, i64 rows, i64 bc, i64 kp, bf16* P, i64 ldp) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < kp; ++c) {
      const Split s = split(c < bc ? fp16_value(ST[c * rows + r]) : 0.0f);
      for (int blk = 0; blk < kSplitTerms; ++blk)
        raw(P)[r * ldp + c / 32 * 96 + blk * 32 + c % 32] = block_bits(s, blk, SplitOrder::hi_hi_lo);
    }
}

void round_rows_bf16_split(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < cols; ++d) {
      const Split s = split(r < n && d < D ? fp16_value(X[r * ldx + d]) : 0.0f);
      for (int blk = 0; blk < kSplitTerms; ++blk)
        raw(out)[r * ldo + d / 32 * 96 + blk * 32 + d % 32] = block_bits(s, blk, SplitOrder::hi_hi_lo);
    }
}

void pack_rows_in_pairs_f32_split(const float* X, i64 ldx, i64 n, i64 kp, i64 cols, std::uint32_t* out, i64 ldo) {
  for (i64 k = 0; k < kp; k += 2) {
    std::uint32_t* chunk = out + ((k / 32) * 48 + (k % 32) / 2) * ldo;  // the chunk's first pair row
    for (i64 l = 0; l < cols; ++l) {
      const Split a = split(k < n ? fp16_value(X[k * ldx + l]) : 0.0f);
      const Split b = split(k + 1 < n ? fp16_value(X[(k + 1) * ldx + l]) : 0.0f);
      for (int blk = 0; blk < kSplitTerms; ++blk)
        chunk[blk * 16 * ldo + l] = block_pair(a, b, blk, SplitOrder::hi_lo_hi);
    }
  }
}

void transpose_f32(const float* X, i64 ldx, i64 rows, i64 cols, float* out, i64 ldo) {
  for (i64 c = 0; c < cols; ++c)
    for (i64 r = 0; r < rows; ++r) out[c * ldo + r] = X[r * ldx + c];
}

void pack_pairs_transposed(const bf16* X, i64 ldx, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo) {
  const i64 pair_rows = (D + 31) / 32 * 16;
  for (i64 k = 0; k < pair_rows; ++k)
    for (i64 c = 0; c < cols; ++c)
      out[k * ldo + c] = pair(bits_at(raw(X), ldx, n, D, c, 2 * k), bits_at(raw(X), ldx, n, D, c, 2 * k + 1));
}

void copy_rows_padded(const bf16* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < cols; ++d) raw(out)[r * ldo + d] = bits_at(raw(X), ldx, n, D, r, d);
}

void round_rows_bf16(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < cols; ++d)
      raw(out)[r * ldo + d] = r < n && d < D ? round_bf16(X[r * ldx + d]) : std::uint16_t{0};
}

}  // namespace sdpa::detail::engine16
