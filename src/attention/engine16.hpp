// engine16.hpp — the 16-bit engines' pieces for the tiled forward (kernel/forward_engine16.inl)
// and the backward's five products (kernel/backward.inl): tile configuration and one bf16
// GEMM on AMX tiles (amx::), the same GEMM by vdpbf16ps (dot::), and the packings their
// operands share (engine16::). Compiled alone with -mamx-tile -mamx-bf16 -mavx512bf16
// (engine16.cpp, src/CMakeLists.txt); called from the AVX-512 path only where the dispatch
// chose an engine (sdpa/dispatch.hpp: Engine16::amx for amx::, either for the rest). On
// aarch64 dot:: runs on BFDOT and the packings are engine16_neon.cpp's, called from the neon
// path where the dispatch chose Engine16::dot.
//
// Every tile this file uses is 16 rows × 64 bytes: an fp32 C tile is 16 × 16 floats, an A
// tile 16 rows × 32 bf16, a B tile 16 rows of 16 bf16 pairs (AMX's B layout: element
// (k, n) of a K × N operand at pair row k/2, pair n, half k%2). tdpbf16ps does
// C += A·B for one such triple: 16 × 16 × 32 products, summed in fp32.
#pragma once

#include <cstdint>

#include "attention/problem.hpp"
#include "sdpa/half.hpp"

namespace sdpa::detail::engine16 {

namespace amx {  // AMX tiles: only where the dispatch chose Engine16::amx

// Tile configuration is per thread and any other library may change it: the forward loads
// it at the start of each item and releases the tiles at its end.
void configure();
void release();

// C (M × N fp32, row stride ldc floats) (+)= A·B: A (M × K bf16, row stride lda elements),
// B (K × N) in pairs, pair row k/2 at B + (k/2)·ldb (ldb in pairs). M, N multiples of 16,
// K a multiple of 32. accumulate: C loaded and added to; else overwritten.
void gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
          bool accumulate);

}  // namespace amx

namespace dot {  // AVX512_BF16 dot products: where the dispatch chose Engine16::dot
// The same product by AVX512_BF16 dot products (vdpbf16ps), no tiles: for CPUs with
// AVX512_BF16 but no AMX (AMD Zen 4). Same operands, same shapes (M, N multiples of 16, K of
// 32); each lane sums its products in pairs (a0·b0 + a1·b1 added to C), as a tile does in
// its own order, so the two engines' bits may differ. No configure() needed.
void gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
          bool accumulate);
}  // namespace dot

// The packings of both engines' operands (AVX-512 and AVX512_BF16).
// P (rows × kp bf16, row stride ldp) = ST transposed and rounded to bf16 (round to nearest
// even, subnormals flushed: vcvtneps2bf16): ST is keys × rows fp32 (row stride `rows`, a
// multiple of 16), keys [0, bc) read, keys [bc, kp) zero. kp a multiple of 32.
void pack_transposed_bf16(const float* ST, i64 rows, i64 bc, i64 kp, bf16* P, i64 ldp);

// Vp (kp/2 pair rows × dp pairs, row stride ldvp pairs) = rows [0, n) of V (D bf16 each, row
// stride ldv, unit stride along D) in pairs, rows [n, kp) and columns [D, dp) zero; dp is D
// rounded up to 16. Returns whether every value read is finite.
bool pack_rows_in_pairs(const bf16* V, i64 ldv, i64 n, i64 D, i64 kp, std::uint32_t* Vp, i64 ldvp);

// Vᵀ (dp × kp 16-bit rows, row stride ldo; dp = D rounded up to 16): out[e][c] = V[c][e]
// for rows c < n of V (16-bit values, bf16 or fp16, moved as bits; row stride ldv, unit
// stride along D), zero for c in [n, kp) and e in [D, dp); kp a multiple of 32. The A
// operand of Oᵀ += Vᵀ·Pᵀ (forward_tiled_engine16). Returns whether every value read is finite
// (exponent: the dtype's exponent bits, 0x7F80 for bf16, 0x7C00 for fp16).
bool pack_transposed_rows(const bf16* V, i64 ldv, i64 n, i64 D, i64 kp, bf16* out, i64 ldo,
                          std::uint16_t exponent = 0x7F80);

// fp16 on bf16 tiles. An fp16 value x is hi + lo exactly, hi = x rounded to bf16 and lo =
// x − hi (fp16's 11 significant bits are bf16's 8 and at most 3 more, and lo's exponent is
// in bf16's range), so a product x·y = hi·hi' + hi·lo' + lo·hi' + lo·lo'. The tiles sum the
// first three; the last is at most 2^-18 of |x·y|, no more than fp32 summation of 64 terms
// may lose (64 · 2^-24). The contraction dimension is split in chunks of 32 (one tile
// step), each widened to 96: the A operand's chunk as (hi, hi, lo), the B operand's as
// (hi, lo, hi), so one tile product over 3× the length sums the three terms.
inline constexpr i64 kSplitTerms = 3;
// The order of a chunk's three blocks. A tile product sums them in order, so swapping which
// operand is A must not change which terms come where: the backward gives the Q and dout
// side hi_hi_lo and the K and V side hi_lo_hi in both schedules, whichever is A there.
enum class SplitOrder { hi_hi_lo, hi_lo_hi };
// out (rows × 3·d32 bf16, row stride ldo) = X's rows [0, n) × elements [0, D) (fp16, row
// stride ldx, unit stride) split as an A operand, chunk by chunk; zero past n and D.
// Returns whether every value read is finite. An infinite x has lo = 0, but its products
// with the other operand's lo (often 0) would still be inf·0 = NaN: a caller takes the
// widened product where an operand is not all finite.
bool split_rows_fp16(const fp16* X, i64 ldx, i64 n, i64 D, i64 rows, i64 d32, bf16* out, i64 ldo,
                     SplitOrder order = SplitOrder::hi_hi_lo);

// X's rows in pairs, rounded to bf16: pair row k, column l holds (X[2k][l], X[2k+1][l]) for
// rows < n of X (fp32, row stride ldx), zero past n; kp/2 pair rows of `cols` (a multiple
// of 16), row stride ldo pairs. Pᵀ (keys × lanes) becomes the B operand of Oᵀ += Vᵀ·Pᵀ with
// one conversion and one permutation per 2 × 16 values, no transpose.
void pack_rows_in_pairs_f32(const float* X, i64 ldx, i64 n, i64 kp, i64 cols, std::uint32_t* out, i64 ldo);
// The backward's operands split, fp16 in (as the functions above without _split take bf16;
// the A operands (hi, hi, lo) and the B operands (hi, lo, hi) per chunk of 32 along the
// contraction, which the layouts make 3× as long):
//   pack_pairs_transposed_split   Xᵀ in pairs (B): 3·d32/2 pair rows
//   pack_rows_in_pairs_split      X in pairs (B): 3·kp/2 pair rows; returns all finite
//   pack_transposed_bf16_split    fp32 tile transposed, rounded to fp16 (A): rows × 3·kp
//   round_rows_bf16_split         fp32 rows rounded to fp16 (A): rows × 3·cols
// (each in the given order of blocks; the defaults are an A's and a B's)
void pack_pairs_transposed_split(const fp16* X, i64 ldx, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo,
                                 SplitOrder order = SplitOrder::hi_lo_hi);
bool pack_rows_in_pairs_split(const fp16* V, i64 ldv, i64 n, i64 D, i64 kp, std::uint32_t* Vp, i64 ldvp,
                              SplitOrder order = SplitOrder::hi_lo_hi);
void pack_transposed_bf16_split(const float* ST, i64 rows, i64 bc, i64 kp, bf16* P, i64 ldp);
void round_rows_bf16_split(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo);

// The same for fp16 as a split B operand: each X rounded to fp16 (as the naive fp16
// implementation rounds P), then each chunk of 32 rows (16 pair rows) written as its hi, lo
// and hi pairs: 3·kp/2 pair rows.
void pack_rows_in_pairs_f32_split(const float* X, i64 ldx, i64 n, i64 kp, i64 cols, std::uint32_t* out, i64 ldo);

// out (cols × rows, row stride ldo) = X (rows × cols fp32, row stride ldx) transposed; rows
// and cols multiples of 16.
void transpose_f32(const float* X, i64 ldx, i64 rows, i64 cols, float* out, i64 ldo);

// Xᵀ in pairs, the B operand of a product that contracts over X's row elements (S = Q·Kᵀ:
// Kᵀ; dP = dout·Vᵀ: Vᵀ; pass B's Qᵀ and doutᵀ): pair row k, column c holds (X[c][2k],
// X[c][2k+1]) for rows c < n of X (bf16, row stride ldx, unit stride along D), zero for
// columns [n, cols) and elements past D; d32/2 pair rows (d32: D rounded up to 32), row
// stride ldo pairs. cols a multiple of 16. A pair is 32 bits, so this is a 32-bit transpose.
void pack_pairs_transposed(const bf16* X, i64 ldx, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo);

// out (rows × cols bf16, row stride ldo) = X's rows [0, n) × elements [0, D) (bf16, row
// stride ldx, unit stride), zero elsewhere: an A operand padded to whole tiles.
void copy_rows_padded(const bf16* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo);

// out (rows × cols bf16, row stride ldo) = X's rows [0, n) × elements [0, D) (fp32, row
// stride ldx) rounded to bf16 as pack_transposed_bf16 rounds, zero elsewhere.
void round_rows_bf16(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo);

}  // namespace sdpa::detail::engine16
