// engine16.cpp — see engine16.hpp. The only file compiled with -mamx-tile -mamx-bf16
// -mavx512bf16 (src/CMakeLists.txt); amx:: (configure, release, gemm) runs only where the
// dispatch chose Engine16::amx, dot::gemm and the packings where it chose an engine
// (AVX512_BF16). Names with weak linkage stay in sdpa::detail::engine16
// (kernel.isa_objects_share_no_inline_code).
#include <immintrin.h>

#include <cstring>

#include "attention/engine16.hpp"

namespace sdpa::detail::engine16 {
namespace {

// The mask of the first `left` of 32 16-bit elements (left clamped to [0, 32]).
__mmask32 first_halves(i64 left) {
  return left >= 32 ? ~__mmask32{0} : left <= 0 ? 0 : (__mmask32{1} << left) - 1;
}

// The mask of the first `left` of 16 floats (left clamped to [0, 16]).
__mmask16 first_floats(i64 left) {
  return left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
}

}  // namespace

namespace amx {
namespace {

// Tile registers: C 0..3 (a 2 × 2 block), A 4, 5, B 6, 7 — all eight, each 16 × 64 bytes.
constexpr int kRows = 16;      // rows of every tile
constexpr i64 kColBytes = 64;  // bytes of a tile row
constexpr i64 kKStep = 32;     // bf16 products one A row × B column sums per instruction

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// One 2 × 2 (MB × NB ≤ 2 × 2) block of 16 × 16 C tiles over all of K. Tile numbers are
// immediates, so each shape is its own instantiation.
template <int MB, int NB>
void gemm_block(i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc, bool accumulate) {
  const i64 a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;  // bytes
  float* c10 = C + kRows * ldc;
  if (accumulate) {
    _tile_loadd(0, C, c_stride);
    if constexpr (NB > 1) _tile_loadd(1, C + 16, c_stride);
    if constexpr (MB > 1) _tile_loadd(2, c10, c_stride);
    if constexpr (MB > 1 && NB > 1) _tile_loadd(3, c10 + 16, c_stride);
  } else {
    _tile_zero(0);
    if constexpr (NB > 1) _tile_zero(1);
    if constexpr (MB > 1) _tile_zero(2);
    if constexpr (MB > 1 && NB > 1) _tile_zero(3);
  }
  for (i64 k = 0; k < K; k += kKStep) {
    const std::uint32_t* b = B + k / 2 * ldb;
    _tile_loadd(4, A + k, a_stride);
    _tile_loadd(6, b, b_stride);
    if constexpr (NB > 1) _tile_loadd(7, b + 16, b_stride);
    if constexpr (MB > 1) _tile_loadd(5, A + kRows * lda + k, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MB > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MB > 1 && NB > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, c_stride);
  if constexpr (NB > 1) _tile_stored(1, C + 16, c_stride);
  if constexpr (MB > 1) _tile_stored(2, c10, c_stride);
  if constexpr (MB > 1 && NB > 1) _tile_stored(3, c10 + 16, c_stride);
}

}  // namespace

void configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = kColBytes, cfg.rows[t] = kRows;
  // Not _tile_loadconfig: GCC 12's macro tells the compiler it reads 8 bytes of the
  // configuration, so the stores above were dropped as dead. This operand is all 64.
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
void release() { _tile_release(); }

void gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
          bool accumulate) {
  for (i64 m = 0; m < M; m += 2 * kRows) {
    const bool two_m = m + 2 * kRows <= M;
    for (i64 n = 0; n < N; n += 32) {
      const bool two_n = n + 32 <= N;
      const bf16* a = A + m * lda;
      const std::uint32_t* b = B + n;
      float* c = C + m * ldc + n;
      if (two_m && two_n)
        gemm_block<2, 2>(K, a, lda, b, ldb, c, ldc, accumulate);
      else if (two_m)
        gemm_block<2, 1>(K, a, lda, b, ldb, c, ldc, accumulate);
      else if (two_n)
        gemm_block<1, 2>(K, a, lda, b, ldb, c, ldc, accumulate);
      else
        gemm_block<1, 1>(K, a, lda, b, ldb, c, ldc, accumulate);
    }
  }
}

}  // namespace amx

namespace dot {
namespace {
// C's rows [0, MR) × columns [0, 16·NV) over all of K by vdpbf16ps: each step takes one
// pair row of B (NV vectors of 16 pairs) and, per row of A, its pair (A[r][2k], A[r][2k+1])
// broadcast to every lane, so lane n gains A[r][2k]·B[2k][n] + A[r][2k+1]·B[2k+1][n]. The
// MR·NV accumulators (16 in every shape dot::gemm takes) are independent chains enough to
// cover the instruction's latency.
template <int MR, int NV>
void dot_block(i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc, bool accumulate) {
  __m512 c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? _mm512_loadu_ps(C + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (i64 k = 0; k < K / 2; ++k) {
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(B + k * ldb + 16 * v);
    for (int r = 0; r < MR; ++r) {
      std::uint32_t pair;
      std::memcpy(&pair, A + r * lda + 2 * k, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, b[v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
}
template <int MR, int NV>
void dot_panel(i64 M, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
               bool accumulate) {
  for (i64 m = 0; m < M; m += MR) dot_block<MR, NV>(K, A + m * lda, lda, B, ldb, C + m * ldc, ldc, accumulate);
}
}  // namespace

void gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
          bool accumulate) {
  // Panels of 64 columns by 4 rows; the last panel's 16, 32 or 48 columns by 16, 8 or 4 rows
  // (M is a multiple of 16, so every shape divides it).
  i64 n = 0;
  for (; n + 64 <= N; n += 64) dot_panel<4, 4>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
  switch ((N - n) / 16) {
    case 3: dot_panel<4, 3>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate); break;
    case 2: dot_panel<8, 2>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate); break;
    case 1: dot_panel<16, 1>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate); break;
    default: break;
  }
}

}  // namespace dot

namespace {
// The 16 × 16 fp32 block x[0..15] (row r in x[r]) transposed in place: four rounds of
// shuffles, within 128-bit lanes, then across them.
inline void transpose16(__m512 x[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(x[i], x[i + 1]);      // per lane: a0 b0 a1 b1
    t[i + 1] = _mm512_unpackhi_ps(x[i], x[i + 1]);  //           a2 b2 a3 b3
  }
  for (int i = 0; i < 16; i += 4) {  // lane L of u[i + c]: column 4L + c of rows i..i+3
    u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    // lanes of v: columns (c, 8+c) of rows 0-3, then of rows 4-7; w likewise rows 8-15.
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    x[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    x[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    x[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    x[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

}  // namespace

namespace {
// ST (keys × rows fp32, row stride `rows`) transposed 16 × 16 at a time: put(r, c0, x) gets
// row r's values of keys [c0, c0 + 16), keys past bc zero, for c0 < kp. The one loop of
// pack_transposed_bf16 and its fp16 twin.
template <class Put>
void for_each_transposed(const float* ST, i64 rows, i64 bc, i64 kp, Put put) {
  for (i64 r0 = 0; r0 < rows; r0 += 16)
    for (i64 c0 = 0; c0 < kp; c0 += 16) {
      __m512 x[16];
      for (i64 c = 0; c < 16; ++c)
        x[c] = c0 + c < bc ? _mm512_loadu_ps(ST + (c0 + c) * rows + r0) : _mm512_setzero_ps();
      transpose16(x);
      for (i64 r = 0; r < 16; ++r) put(r0 + r, c0, x[r]);
    }
}
// X's rows [0, rows) by 16 values: put(r, d, x) gets elements [d, d + 16) of row r (rows past
// n and elements past D zero), for d < cols. The one loop of round_rows_bf16 and its twin.
template <class Put>
void for_each_row_vector(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, Put put) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < cols; d += 16)
      put(r, d, r < n ? _mm512_maskz_loadu_ps(first_floats(D - d), X + r * ldx + d) : _mm512_setzero_ps());
}
}  // namespace

void pack_transposed_bf16(const float* ST, i64 rows, i64 bc, i64 kp, bf16* P, i64 ldp) {
  for_each_transposed(ST, rows, bc, kp, [&](i64 r, i64 c0, __m512 x) {
    const __m256bh h = _mm512_cvtneps_pbh(x);
    std::memcpy(P + r * ldp + c0, &h, sizeof h);
  });
}

bool pack_rows_in_pairs(const bf16* V, i64 ldv, i64 n, i64 D, i64 kp, std::uint32_t* Vp, i64 ldvp) {
  // Element e of the result: even e from a's e/2, odd e from b's (index 32 + e/2).
  alignas(64) std::uint16_t lo_idx[32], hi_idx[32];
  for (int e = 0; e < 32; ++e) {
    lo_idx[e] = static_cast<std::uint16_t>(e / 2 + (e % 2) * 32);
    hi_idx[e] = static_cast<std::uint16_t>(16 + e / 2 + (e % 2) * 32);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const __m512i exponent = _mm512_set1_epi16(0x7F80);
  const i64 dp = (D + 15) / 16 * 16;
  __mmask32 not_finite = 0;
  for (i64 k = 0; k < kp; k += 2) {
    std::uint32_t* out = Vp + k / 2 * ldvp;
    for (i64 d = 0; d < dp; d += 32) {
      const __mmask32 m = first_halves(D - d);
      const __m512i a = k < n ? _mm512_maskz_loadu_epi16(m, V + k * ldv + d) : _mm512_setzero_si512();
      const __m512i b = k + 1 < n ? _mm512_maskz_loadu_epi16(m, V + (k + 1) * ldv + d) : _mm512_setzero_si512();
      not_finite |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(a, exponent), exponent) |
                    _mm512_cmpeq_epi16_mask(_mm512_and_si512(b, exponent), exponent);
      _mm512_storeu_si512(out + d, _mm512_permutex2var_epi16(a, lo, b));
      if (d + 16 < dp) _mm512_storeu_si512(out + d + 16, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
  return not_finite == 0;
}

void pack_pairs_transposed(const bf16* X, i64 ldx, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo) {
  const i64 pair_rows = (D + 31) / 32 * 16;
  for (i64 c0 = 0; c0 < cols; c0 += 16)
    for (i64 k0 = 0; k0 < pair_rows; k0 += 16) {  // 16 rows of X × 16 pairs, as 16 × 16 32-bit words
      const __mmask32 m = first_halves(D - 2 * k0);
      __m512 x[16];
      for (i64 c = 0; c < 16; ++c)
        x[c] = c0 + c < n ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, X + (c0 + c) * ldx + 2 * k0))
                          : _mm512_setzero_ps();
      transpose16(x);
      for (i64 k = 0; k < 16; ++k) _mm512_storeu_ps(out + (k0 + k) * ldo + c0, x[k]);
    }
}

void copy_rows_padded(const bf16* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < cols; d += 32) {
      const __m512i x = r < n ? _mm512_maskz_loadu_epi16(first_halves(D - d), X + r * ldx + d) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi16(out + r * ldo + d, first_halves(cols - d), x);
    }
}

void round_rows_bf16(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) {
  for_each_row_vector(X, ldx, n, D, rows, cols, [&](i64 r, i64 d, __m512 x) {
    const __m256bh h = _mm512_cvtneps_pbh(x);
    __m256i bits;
    std::memcpy(&bits, &h, sizeof h);
    _mm256_mask_storeu_epi16(out + r * ldo + d, first_floats(cols - d), bits);
  });
}

bool pack_transposed_rows(const bf16* V, i64 ldv, i64 n, i64 D, i64 kp, bf16* out, i64 ldo,
                          std::uint16_t exponent_bits) {
  const i64 dp = (D + 15) / 16 * 16;
  const __m512i exponent = _mm512_set1_epi16(static_cast<short>(exponent_bits));
  __mmask32 not_finite = 0;
  for (i64 c0 = 0; c0 < kp; c0 += 16)
    for (i64 d0 = 0; d0 < dp; d0 += 32) {  // 16 keys × 32 elements, as 16 × 16 pairs
      const __mmask32 m = first_halves(D - d0);
      __m512 x[16];
      for (i64 c = 0; c < 16; ++c) {
        const __m512i row = c0 + c < n ? _mm512_maskz_loadu_epi16(m, V + (c0 + c) * ldv + d0) : _mm512_setzero_si512();
        not_finite |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(row, exponent), exponent);
        x[c] = _mm512_castsi512_ps(row);
      }
      transpose16(x);  // x[k]: the pairs (2k, 2k + 1) of keys c0..c0+15
      for (i64 k = 0; k < 16 && d0 + 2 * k < dp; ++k) {
        const __m512i pairs = _mm512_castps_si512(x[k]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (d0 + 2 * k) * ldo + c0), _mm512_cvtepi32_epi16(pairs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (d0 + 2 * k + 1) * ldo + c0),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(pairs, 16)));
      }
    }
  return not_finite == 0;
}

void pack_rows_in_pairs_f32(const float* X, i64 ldx, i64 n, i64 kp, i64 cols, std::uint32_t* out, i64 ldo) {
  // cvtne2ps gives row 2k in bf16 elements 0..15 and row 2k + 1 in 16..31; element e of
  // the result takes e/2 + 16·(e%2): lane l's pair.
  alignas(64) std::uint16_t idx[32];
  for (int e = 0; e < 32; ++e) idx[e] = static_cast<std::uint16_t>(e / 2 + (e % 2) * 16);
  const __m512i interleave = _mm512_load_si512(idx);
  for (i64 k = 0; k < kp; k += 2)
    for (i64 l = 0; l < cols; l += 16) {
      const __m512 even = k < n ? _mm512_loadu_ps(X + k * ldx + l) : _mm512_setzero_ps();
      const __m512 odd = k + 1 < n ? _mm512_loadu_ps(X + (k + 1) * ldx + l) : _mm512_setzero_ps();
      const __m512bh both = _mm512_cvtne2ps_pbh(odd, even);
      __m512i bits;
      std::memcpy(&bits, &both, sizeof bits);
      _mm512_storeu_si512(out + k / 2 * ldo + l, _mm512_permutexvar_epi16(interleave, bits));
    }
}

namespace {
// x (16 floats, each an fp16 value) as bf16 hi and lo: hi = x rounded, lo = x − hi exactly;
// lo = 0 for an infinite x (not inf − inf: ±inf·y must stay ±inf, as widened).
void split16(__m512 x, __m256i& hi, __m256i& lo) {
  const __m256bh h = _mm512_cvtneps_pbh(x);
  std::memcpy(&hi, &h, sizeof hi);
  const __m512 h_f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
  const __mmask16 infinite = _mm512_fpclass_ps_mask(h_f, 0x18);  // +inf, -inf
  const __m256bh l = _mm512_cvtneps_pbh(_mm512_maskz_sub_ps(static_cast<__mmask16>(~infinite), x, h_f));
  std::memcpy(&lo, &l, sizeof lo);
}

// 16 fp32 values rounded to fp16 and back: exact fp16 values, as the naive fp16 rounds.
__m512 to_fp16_values(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
// The 32-bit words (a[l], b[l]): two rows of 16 bf16 interleaved into pairs.
__m512i pair_words(__m256i a, __m256i b) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(a), _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}
// The block (0, 1, 2) of a chunk that holds lo, and the other two hi.
int lo_block(SplitOrder order) { return order == SplitOrder::hi_hi_lo ? 2 : 1; }
// One chunk's three blocks of 16 values at `at` (block stride 32), in `order`.
void store_a_split(bf16* at, __m256i hi, __m256i lo, SplitOrder order = SplitOrder::hi_hi_lo) {
  for (int blk = 0; blk < 3; ++blk)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + 32 * blk), blk == lo_block(order) ? lo : hi);
}
}  // namespace

void pack_rows_in_pairs_f32_split(const float* X, i64 ldx, i64 n, i64 kp, i64 cols, std::uint32_t* out, i64 ldo) {
  for (i64 k = 0; k < kp; k += 2)
    for (i64 l = 0; l < cols; l += 16) {
      // Rows 2k and 2k + 1 rounded to fp16 (exact in fp32), split, and paired lane by lane.
      const __m512 even = k < n ? to_fp16_values(_mm512_loadu_ps(X + k * ldx + l)) : _mm512_setzero_ps();
      const __m512 odd = k + 1 < n ? to_fp16_values(_mm512_loadu_ps(X + (k + 1) * ldx + l)) : _mm512_setzero_ps();
      __m256i even_hi, even_lo, odd_hi, odd_lo;
      split16(even, even_hi, even_lo);
      split16(odd, odd_hi, odd_lo);
      const __m512i hi = pair_words(even_hi, odd_hi), lo = pair_words(even_lo, odd_lo);
      std::uint32_t* chunk = out + ((k / 32) * 48 + (k % 32) / 2) * ldo + l;  // the chunk's first pair row
      for (int blk = 0; blk < 3; ++blk)
        _mm512_storeu_si512(chunk + blk * 16 * ldo, blk == lo_block(SplitOrder::hi_lo_hi) ? lo : hi);
    }
}

bool split_rows_fp16(const fp16* X, i64 ldx, i64 n, i64 D, i64 rows, i64 d32, bf16* out, i64 ldo,
                     SplitOrder order) {
  const __m256i exponent = _mm256_set1_epi16(0x7C00);
  __mmask16 not_finite = 0;
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < d32; d += 16) {
      const __m256i bits = r < n ? _mm256_maskz_loadu_epi16(first_floats(D - d), X + r * ldx + d) : _mm256_setzero_si256();
      not_finite |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(bits, exponent), exponent);
      __m256i hi, lo;
      split16(_mm512_cvtph_ps(bits), hi, lo);
      store_a_split(out + r * ldo + (d / 32) * 96 + d % 32, hi, lo, order);
    }
  return not_finite == 0;
}


void pack_pairs_transposed_split(const fp16* X, i64 ldx, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo,
                                 SplitOrder order) {
  const i64 chunks = (D + 31) / 32;
  for (i64 c0 = 0; c0 < cols; c0 += 16)
    for (i64 ch = 0; ch < chunks; ++ch) {  // 16 rows of X × 32 elements: 16 pairs each, hi and lo
      __m512 hi[16], lo[16];
      for (i64 c = 0; c < 16; ++c) {
        __m256i h[2], l[2];
        for (int half = 0; half < 2; ++half) {
          const i64 d = ch * 32 + half * 16;
          const __m256i bits = c0 + c < n ? _mm256_maskz_loadu_epi16(first_floats(D - d), X + (c0 + c) * ldx + d)
                                          : _mm256_setzero_si256();
          split16(_mm512_cvtph_ps(bits), h[half], l[half]);
        }
        hi[c] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
        lo[c] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1));
      }
      transpose16(hi);
      transpose16(lo);
      for (i64 k = 0; k < 16; ++k)
        for (int blk = 0; blk < 3; ++blk)
          _mm512_storeu_ps(out + (ch * 48 + blk * 16 + k) * ldo + c0, blk == lo_block(order) ? lo[k] : hi[k]);
    }
}

bool pack_rows_in_pairs_split(const fp16* V, i64 ldv, i64 n, i64 D, i64 kp, std::uint32_t* Vp, i64 ldvp,
                              SplitOrder order) {
  const i64 dp = (D + 15) / 16 * 16;
  const __m256i exponent = _mm256_set1_epi16(0x7C00);
  __mmask16 not_finite = 0;
  for (i64 k = 0; k < kp; k += 2) {
    std::uint32_t* out = Vp + ((k / 32) * 48 + (k % 32) / 2) * ldvp;  // the chunk's hi pair row
    for (i64 e = 0; e < dp; e += 16) {
      const __mmask16 m = first_floats(D - e);
      const __m256i a = k < n ? _mm256_maskz_loadu_epi16(m, V + k * ldv + e) : _mm256_setzero_si256();
      const __m256i b = k + 1 < n ? _mm256_maskz_loadu_epi16(m, V + (k + 1) * ldv + e) : _mm256_setzero_si256();
      not_finite |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(a, exponent), exponent) |
                    _mm256_cmpeq_epi16_mask(_mm256_and_si256(b, exponent), exponent);
      __m256i a_hi, a_lo, b_hi, b_lo;
      split16(_mm512_cvtph_ps(a), a_hi, a_lo);
      split16(_mm512_cvtph_ps(b), b_hi, b_lo);
      const __m512i hi = pair_words(a_hi, b_hi), lo = pair_words(a_lo, b_lo);
      for (int blk = 0; blk < 3; ++blk) _mm512_storeu_si512(out + blk * 16 * ldvp + e, blk == lo_block(order) ? lo : hi);
    }
  }
  return not_finite == 0;
}

void pack_transposed_bf16_split(const float* ST, i64 rows, i64 bc, i64 kp, bf16* P, i64 ldp) {
  for_each_transposed(ST, rows, bc, kp, [&](i64 r, i64 c0, __m512 x) {
    __m256i hi, lo;
    split16(to_fp16_values(x), hi, lo);
    store_a_split(P + r * ldp + c0 / 32 * 96 + c0 % 32, hi, lo);
  });
}

void round_rows_bf16_split(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) {
  for_each_row_vector(X, ldx, n, D, rows, cols, [&](i64 r, i64 d, __m512 x) {
    __m256i hi, lo;
    split16(to_fp16_values(x), hi, lo);
    store_a_split(out + r * ldo + d / 32 * 96 + d % 32, hi, lo);
  });
}

void transpose_f32(const float* X, i64 ldx, i64 rows, i64 cols, float* out, i64 ldo) {
  for (i64 r0 = 0; r0 < rows; r0 += 16)
    for (i64 c0 = 0; c0 < cols; c0 += 16) {
      __m512 x[16];
      for (i64 r = 0; r < 16; ++r) x[r] = _mm512_loadu_ps(X + (r0 + r) * ldx + c0);
      transpose16(x);
      for (i64 c = 0; c < 16; ++c) _mm512_storeu_ps(out + (c0 + c) * ldo + r0, x[c]);
    }
}

}  // namespace sdpa::detail::engine16
