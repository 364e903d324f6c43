// fast_kernel.inl — the tiled online-softmax kernel (FlashAttention-2 structure),
// written once against a `Vec` (simd_*.hpp) and included inside one namespace per
// ISA. Only builtins, intrinsics and functions defined here are called, so no
// inline function compiled for one ISA is shared with another (ODR safety).
//
// Notation: a tile has `br` query rows (r) and `bc` keys (c); i = i0 + r, j = j0 + c.
// Vector dimensions are padded to a multiple of kPad with zeros.

using R = typename Vec::R;
constexpr int W = Vec::W;
constexpr float kNegInf = -__builtin_inff();
constexpr float kPosInf = __builtin_inff();

inline i64 imin(i64 a, i64 b) { return a < b ? a : b; }
inline i64 imax(i64 a, i64 b) { return a > b ? a : b; }
inline i64 round_up(i64 x, i64 m) { return (x + m - 1) / m * m; }
inline bool is_finite(float x) { return x - x == 0.0f; }  // false for ±inf and NaN

// Structural visible range of query row i, [row_lo, row_hi] (mirrors Problem::lo/hi,
// redefined here so the ISA namespaces share no inline code).
inline i64 row_lo(const Problem& p, i64 i) {
  return p.window_left < 0 ? 0 : imax(0, i + p.diag_offset - p.window_left);
}
inline i64 row_hi(const Problem& p, i64 i) {
  i64 h = p.Nk - 1;
  const i64 d = i + p.diag_offset;
  if (p.causal) h = imin(h, d);
  if (p.window_right >= 0) h = imin(h, d + p.window_right);
  return h;
}
inline bool structural(const Problem& p) { return p.causal || p.window_left >= 0 || p.window_right >= 0; }
inline bool explicit_mask(const Problem& p) { return p.mask.data != nullptr || p.keep.data != nullptr; }

template <class T, std::size_t N>
inline i64 off(const View<T, N>& v, i64 a, i64 b, i64 c, i64 d) {
  return a * v.stride[0] + b * v.stride[1] + c * v.stride[2] + d * v.stride[3];
}
inline i64 off3(const View3<const float>& v, i64 a, i64 b, i64 c) {
  return a * v.stride[0] + b * v.stride[1] + c * v.stride[2];
}
inline i64 off3w(const View3<float>& v, i64 a, i64 b, i64 c) {
  return a * v.stride[0] + b * v.stride[1] + c * v.stride[2];
}

// Explicit-mask bias for (b, h, i, j): 0, finite, or -inf (masked).
inline float bias_at(const Problem& p, i64 b, i64 h, i64 i, i64 j) {
  if (p.keep.data != nullptr && p.keep.data[off(p.keep, b, h, i, j)] == 0) return kNegInf;
  return p.mask.data == nullptr ? 0.0f : p.mask.data[off(p.mask, b, h, i, j)];
}

// ---------------------------------------------------------------------------------------
// C (+)= A·B: C (M × N), A (M × K) with strides (ars, acs), B (K × N) rows of ldb.
// N is a multiple of W. Register-blocked MR rows × NV vectors.
template <int MR, int NV, bool ACC>
inline void gemm_block(i64 K, const float* A, i64 ars, i64 acs, const float* B, i64 ldb, float* C, i64 ldc) {
  R acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = ACC ? Vec::load(C + r * ldc + v * W) : Vec::zero();
  for (i64 k = 0; k < K; ++k) {
    R bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Vec::load(B + k * ldb + v * W);
    for (int r = 0; r < MR; ++r) {
      const R a = Vec::set1(A[r * ars + k * acs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = Vec::fma(a, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) Vec::store(C + r * ldc + v * W, acc[r][v]);
}

template <int MR, bool ACC>
inline void gemm_rows(i64 nv, i64 K, const float* A, i64 ars, i64 acs, const float* B, i64 ldb, float* C, i64 ldc) {
  static_assert(Vec::NV <= 4, "extend the switch below");
  switch (nv) {
    case 1: gemm_block<MR, 1, ACC>(K, A, ars, acs, B, ldb, C, ldc); break;
    case 2:
      if constexpr (Vec::NV >= 2) gemm_block<MR, 2, ACC>(K, A, ars, acs, B, ldb, C, ldc);
      break;
    case 3:
      if constexpr (Vec::NV >= 3) gemm_block<MR, 3, ACC>(K, A, ars, acs, B, ldb, C, ldc);
      break;
    case 4:
      if constexpr (Vec::NV >= 4) gemm_block<MR, 4, ACC>(K, A, ars, acs, B, ldb, C, ldc);
      break;
    default: break;
  }
}

// SKIP_ZERO: terms with A = 0 are skipped, so a zero weight never multiplies an
// inf or NaN in B (used only when B holds a non-finite value).
template <bool ACC, bool SKIP_ZERO>
void gemm(i64 M, i64 N, i64 K, const float* A, i64 ars, i64 acs, const float* B, i64 ldb, float* C, i64 ldc) {
  if constexpr (SKIP_ZERO) {
    for (i64 m = 0; m < M; ++m) {
      float* c = C + m * ldc;
      if (!ACC)
        for (i64 n = 0; n < N; n += W) Vec::store(c + n, Vec::zero());
      for (i64 k = 0; k < K; ++k) {
        const float a = A[m * ars + k * acs];
        if (a == 0.0f) continue;
        const R av = Vec::set1(a);
        for (i64 n = 0; n < N; n += W) Vec::store(c + n, Vec::fma(av, Vec::load(B + k * ldb + n), Vec::load(c + n)));
      }
    }
    return;
  }
  constexpr i64 MR = Vec::MR;
  for (i64 n0 = 0; n0 < N; n0 += Vec::NV * W) {
    const i64 nv = imin(Vec::NV, (N - n0) / W);
    i64 m0 = 0;
    for (; m0 + MR <= M; m0 += MR)
      gemm_rows<MR, ACC>(nv, K, A + m0 * ars, ars, acs, B + n0, ldb, C + m0 * ldc + n0, ldc);
    const float* a = A + m0 * ars;
    float* c = C + m0 * ldc + n0;
    switch (M - m0) {
      case 1: gemm_rows<1, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc); break;
      case 2: gemm_rows<2, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc); break;
      case 3: gemm_rows<3, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc); break;
      default: break;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Score post-processing: s = β x, then soft-cap (t = tanh(s/c) saved when T != null).
inline void scale_softcap(const Problem& p, float* S, i64 ld, i64 rows, i64 cols, float* T) {
  const R beta = Vec::set1(static_cast<float>(p.scale));
  const R cap = Vec::set1(static_cast<float>(p.softcap));
  const R inv_cap = Vec::set1(static_cast<float>(1.0 / p.softcap));
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; c += W) {
      R s = Vec::mul(Vec::load(S + r * ld + c), beta);
      if (p.has_softcap) {
        const R t = Vec::tanh(Vec::mul(s, inv_cap));
        if (T) Vec::store(T + r * ld + c, t);
        s = Vec::mul(cap, t);
      }
      Vec::store(S + r * ld + c, s);
    }
}

// Masks on a tile stored row = query, column = key (forward, backward pass B).
// Columns in [bc, bcp) are padding and become -inf.
inline void mask_rows(const Problem& p, float* S, i64 ld, i64 b, i64 h, i64 i0, i64 br, i64 j0, i64 bc, i64 bcp) {
  const bool st = structural(p), ex = explicit_mask(p);
  for (i64 r = 0; r < br; ++r) {
    float* s = S + r * ld;
    const i64 i = i0 + r;
    const i64 lo = st ? imax(0, row_lo(p, i) - j0) : 0;            // first visible column
    const i64 hi = st ? imin(bc - 1, row_hi(p, i) - j0) : bc - 1;  // last visible column
    for (i64 c = 0; c < imin(lo, bcp); ++c) s[c] = kNegInf;
    for (i64 c = imax(hi + 1, 0); c < bcp; ++c) s[c] = kNegInf;
    if (ex)
      for (i64 c = lo; c <= hi; ++c) {
        const float bias = bias_at(p, b, h, i, j0 + c);
        s[c] = bias == kNegInf ? kNegInf : s[c] + bias;
      }
  }
}

// Whether structural masking can skip the mask pass for this tile.
inline bool tile_needs_mask(const Problem& p, i64 i0, i64 br, i64 j0, i64 bc, i64 bcp) {
  if (bc != bcp || explicit_mask(p)) return true;
  if (!structural(p)) return false;
  return !(row_lo(p, i0 + br - 1) <= j0 && row_hi(p, i0) >= j0 + bc - 1);
}

// Key-tile range a query tile can see: [first, last] key index (last < first: none).
inline void key_range(const Problem& p, i64 i0, i64 br, i64& first, i64& last) {
  first = structural(p) ? row_lo(p, i0) : 0;
  last = structural(p) ? row_hi(p, i0 + br - 1) : p.Nk - 1;
  first = imax(first, 0);
  last = imin(last, p.Nk - 1);
}

// Packs keys [j0, j0+bc) of (b, g) transposed: KT[d][c] (Dk × ld), zero columns up to ld.
inline void pack_transposed(const View4<const float>& x, i64 b, i64 g, i64 j0, i64 bc, i64 D, float* out, i64 ld) {
  for (i64 d = 0; d < D; ++d) {
    float* o = out + d * ld;
    for (i64 c = 0; c < bc; ++c) o[c] = x.data[off(x, b, g, j0 + c, d)];
    for (i64 c = bc; c < ld; ++c) o[c] = 0.0f;
  }
}
// Packs rows [j0, j0+n) of (b, g) as rows of ld floats, zero-padded; returns whether all finite.
inline bool pack_rows(const View4<const float>& x, i64 b, i64 g, i64 j0, i64 n, i64 D, float* out, i64 ld) {
  bool finite = true;
  for (i64 c = 0; c < n; ++c) {
    float* o = out + c * ld;
    for (i64 d = 0; d < D; ++d) {
      const float val = x.data[off(x, b, g, j0 + c, d)];
      finite &= is_finite(val);
      o[d] = val;
    }
    for (i64 d = D; d < ld; ++d) o[d] = 0.0f;
  }
  return finite;
}

// A bump allocator over one worker's scratch, 64-byte aligned pieces.
struct Carve {
  float* p;
  float* take(i64 n) {
    float* r = p;
    p += round_up(n, kPad);
    return r;
  }
};

// ---------------------------------------------------------------------------------------
// Forward, in the transposed layout: a tile holds Sᵀ (bc keys × np query lanes), so
//   Sᵀ = K·Qᵀ     reads K rows straight from the tensor (broadcast A operand),
//   O += P·V      reads V rows straight from the tensor (B operand, when unit-stride),
// and only Q is packed (transposed), once per item. The online softmax runs down the
// key rows with one query per vector lane: no horizontal reductions.
// Lanes are the item's query rows flattened over the kv group's query heads, so a
// group's heads share every K and V load (GQA decoding reads K and V once):
//   lane r  ->  flat l = it.l0 + r,  h = g·group + l / Nq,  i = l % Nq.

// Whether every element of rows [0, n) (width D, row stride ld, unit stride along D) is
// finite: Σ x·0 is NaN as soon as one x is ±inf or NaN.
inline bool rows_finite(const float* x, i64 ld, i64 n, i64 D) {
  // Eight rows at a time, one accumulator each: one chain through all n·D/W FMAs would
  // be bound by the FMA latency (and cost as much as a decoding tile's arithmetic).
  const R z = Vec::zero();
  R a[8] = {z, z, z, z, z, z, z, z};
  const i64 dv = D / W * W;
  float tail = 0.0f;
  i64 c = 0;
  for (; c + 8 <= n; c += 8)
    for (i64 d = 0; d < dv; d += W)
      for (int u = 0; u < 8; ++u) a[u] = Vec::fma(Vec::load(x + (c + u) * ld + d), z, a[u]);
  for (; c < n; ++c)
    for (i64 d = 0; d < dv; d += W) a[0] = Vec::fma(Vec::load(x + c * ld + d), z, a[0]);
  for (i64 r = 0; r < n; ++r)
    for (i64 d = dv; d < D; ++d) tail += x[r * ld + d] * 0.0f;
  const R s = Vec::add(Vec::add(Vec::add(a[0], a[1]), Vec::add(a[2], a[3])),
                       Vec::add(Vec::add(a[4], a[5]), Vec::add(a[6], a[7])));
  return is_finite(Vec::hsum(s) + tail);
}

// Sᵀ for a tile with few query lanes (decoding): one dot product per (key, lane), the key
// row loaded once in vector chunks and reused for every lane, then one horizontal sum.
// The GEMM form would spend a broadcast and a full-width FMA per (key, element) with
// most lanes idle. Qr: the n lanes' queries as rows of ldq floats. Needs unit-stride keys.
// (The AVX-512 build takes such items through decode_avx512.inl instead, which fuses the
// scores, the softmax and P·V per tile; this path serves AVX2, the scalar build, and
// items that one cannot take: explicit masks, strided V.)
constexpr i64 kFewLanes = 8;
// Keys per tile on that path: K and V are consumed a few KiB at a time, so the rows
// prefetched ahead (below) are still in L2 when the tile reaches them.
constexpr i64 kFewTileCols = 32;
// ... and how far ahead its K and V rows are prefetched into L2. The hardware prefetchers
// stop at 4 KiB pages, which hold only 8 rows of a D = 128 head. Measured on the suite's
// decoding shape: 1.1-1.3x from memory (docs/performance.md, "Decoding").
constexpr i64 kFewPrefetchKeys = 64;
inline void prefetch_rows(const float* x, i64 ld, i64 rows, i64 D) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 e = 0; e < D; e += 16) __builtin_prefetch(x + r * ld + e, 0, 2);
}
// One (key, lane) dot product over whole vectors, up to dv (a multiple of W).
inline float dot_tail(const float* k, const float* q, i64 dv, i64 D) {
  float x = 0.0f;
  for (i64 e = dv; e < D; ++e) x += k[e] * q[e];
  return x;
}
// NL lanes × 4 keys: 4·NL independent accumulator chains (an FMA's latency is hidden
// only with at least 8 in flight), each key chunk loaded once for all NL lanes.
template <int NL>
inline void scores_keys4(const float* k0, i64 ldk, i64 dv, i64 Dk, const float* q, i64 ldq, float* st, i64 np) {
  const float* k[4] = {k0, k0 + ldk, k0 + 2 * ldk, k0 + 3 * ldk};
  R a[NL][4];
  for (int l = 0; l < NL; ++l)
    for (int c = 0; c < 4; ++c) a[l][c] = Vec::zero();
  for (i64 d = 0; d < dv; d += W) {
    R kv[4];
    for (int c = 0; c < 4; ++c) kv[c] = Vec::load(k[c] + d);
    for (int l = 0; l < NL; ++l) {
      const R qv = Vec::load(q + l * ldq + d);
      for (int c = 0; c < 4; ++c) a[l][c] = Vec::fma(kv[c], qv, a[l][c]);
    }
  }
  for (int l = 0; l < NL; ++l)
    for (int c = 0; c < 4; ++c) st[c * np + l] = Vec::hsum(a[l][c]) + dot_tail(k[c], q + l * ldq, dv, Dk);
}
template <int NL>
inline void scores_key1(const float* k, i64 dv, i64 Dk, const float* q, i64 ldq, float* st) {
  R a[NL];
  for (int l = 0; l < NL; ++l) a[l] = Vec::zero();
  for (i64 d = 0; d < dv; d += W) {
    const R kv = Vec::load(k + d);
    for (int l = 0; l < NL; ++l) a[l] = Vec::fma(kv, Vec::load(q + l * ldq + d), a[l]);
  }
  for (int l = 0; l < NL; ++l) st[l] = Vec::hsum(a[l]) + dot_tail(k, q + l * ldq, dv, Dk);
}
// Lanes per register block: 4 × 4 accumulators + 4 keys + a query fit AVX-512's 32
// registers; AVX2's 16 take 2 lanes.
constexpr int kScoreLanes = W >= 16 ? 4 : 2;
template <int NL>
inline void scores_lane_block(const float* K, i64 ldk, i64 bc, i64 dv, i64 Dk, const float* q, i64 ldq, float* st,
                              i64 np) {
  i64 c = 0;
  for (; c + 4 <= bc; c += 4) scores_keys4<NL>(K + c * ldk, ldk, dv, Dk, q, ldq, st + c * np, np);
  for (; c < bc; ++c) scores_key1<NL>(K + c * ldk, dv, Dk, q, ldq, st + c * np);
}
inline void scores_few_lanes(const float* K, i64 ldk, i64 bc, i64 Dk, const float* Qr, i64 ldq, i64 n, float* ST,
                             i64 np) {
  const i64 dv = Dk / W * W;
  i64 r = 0;
  for (; r + kScoreLanes <= n; r += kScoreLanes)
    scores_lane_block<kScoreLanes>(K, ldk, bc, dv, Dk, Qr + r * ldq, ldq, ST + r, np);
  switch (n - r) {
    case 1: scores_lane_block<1>(K, ldk, bc, dv, Dk, Qr + r * ldq, ldq, ST + r, np); break;
    case 2: scores_lane_block<2>(K, ldk, bc, dv, Dk, Qr + r * ldq, ldq, ST + r, np); break;
    case 3: scores_lane_block<3>(K, ldk, bc, dv, Dk, Qr + r * ldq, ldq, ST + r, np); break;
    default: break;
  }
  for (i64 cc = 0; cc < bc; ++cc)
    for (i64 x = n; x < np; ++x) ST[cc * np + x] = 0.0f;
}

// Writes lane r of an item (query head h, row i) from its running max m, sum l and
// unnormalised output row O: out and lse, or the split's partial results.
inline void finish_row(const Problem& p, const Tensors& t, const ForwardItem& it, i64 b, i64 h, i64 i, i64 r, float m,
                       float l, const float* O) {
  const i64 Dv = p.Dv;
  const bool empty_row = l == 0.0f;
  const float inv = empty_row ? 0.0f : 1.0f / l;
  const float shift = m == kNegInf ? 0.0f : m;
  const float lse = empty_row ? kNegInf : shift + __builtin_logf(l);
  if (it.part_out != nullptr) {  // split-KV: this split's normalised output and lse
    float* po = it.part_out + (it.l0 + r) * Dv;
    for (i64 e = 0; e < Dv; ++e) po[e] = empty_row ? 0.0f : O[e] * inv;
    it.part_lse[it.l0 + r] = lse;
    return;
  }
  for (i64 e = 0; e < Dv; ++e) t.out_w.data[off(t.out_w, b, h, i, e)] = empty_row ? 0.0f : O[e] * inv;
  if (t.lse_w.data != nullptr) t.lse_w.data[off3w(t.lse_w, b, h, i)] = lse;
}

#ifdef SDPA_FUSED_DECODE
#include "attention/decode_avx512.inl"
#endif

std::size_t forward_scratch(const Problem& p) {
  const i64 dvp = round_up(p.Dv, kPad);
  const i64 n = p.Dk * kTileRows + kTileCols * kTileRows + kTileCols * dvp + kTileRows * dvp + 3 * kTileRows + 8 * kPad;
  return static_cast<std::size_t>(n);
}

void forward_item(const Problem& p, const Tensors& t, const ForwardItem& it, float* scratch) {
  const i64 b = it.b, g = it.g, Dk = p.Dk, Dv = p.Dv, dvp = round_up(Dv, kPad);
  const i64 n = imin(kTileRows, p.group * p.Nq - it.l0), np = round_up(n, kPad);
  Carve cv{scratch};
  float* QT = cv.take(Dk * kTileRows);         // (Dk, np)  packed queries, lanes along rows
  float* ST = cv.take(kTileCols * kTileRows);  // (bc, np)  scores, then probabilities
  float* Vp = cv.take(kTileCols * dvp);        // (bc, dvp) V rows, when they cannot be read in place
  float* O = cv.take(kTileRows * dvp);         // (n, dvp)  unnormalised output
  float* m = cv.take(kTileRows);               // (np) running max
  float* l = cv.take(kTileRows);               // (np) running sum
  float* al = cv.take(kTileRows);              // (np) this tile's rescale factor

  i64 lh[kTileRows], li[kTileRows];  // each lane's query head and row
  i64 i_min = p.Nq, i_max = 0;
  for (i64 r = 0; r < n; ++r) {
    const i64 flat = it.l0 + r;
    lh[r] = g * p.group + flat / p.Nq, li[r] = flat % p.Nq;
    i_min = imin(i_min, li[r]), i_max = imax(i_max, li[r]);
  }
#ifdef SDPA_FUSED_DECODE
  if (decode::applies(p, t, n)) return decode::forward(p, t, it, lh, li, n, scratch);
#endif
  // Few lanes and unit-stride keys: Q as rows (n × Dk) for scores_few_lanes; else Qᵀ (Dk × np).
  const bool few = n <= kFewLanes && t.k.stride[3] == 1;
  if (few) {
    for (i64 r = 0; r < n; ++r)
      for (i64 d = 0; d < Dk; ++d) QT[r * Dk + d] = t.q.data[off(t.q, b, lh[r], li[r], d)];
  } else {
    for (i64 d = 0; d < Dk; ++d) {
      float* o = QT + d * np;
      for (i64 r = 0; r < n; ++r) o[r] = t.q.data[off(t.q, b, lh[r], li[r], d)];
      for (i64 r = n; r < np; ++r) o[r] = 0.0f;
    }
  }
  for (i64 x = 0; x < n * dvp; ++x) O[x] = 0.0f;
  for (i64 r = 0; r < np; ++r) m[r] = kNegInf, l[r] = 0.0f;

  // Keys any lane can see (row_lo, row_hi are monotone in i), within this item's split.
  const bool st = structural(p), ex = explicit_mask(p);
  const i64 first = imax(st ? imax(0, row_lo(p, i_min)) : 0, it.j_begin);
  const i64 last = imin(st ? imin(p.Nk - 1, row_hi(p, i_max)) : p.Nk - 1, it.j_end - 1);
  const bool v_direct = t.v.stride[3] == 1 && Dv % W == 0;
  const R neg_inf = Vec::set1(kNegInf);

  const i64 tc = few ? kFewTileCols : kTileCols;  // split boundaries are multiples of both
  for (i64 j0 = first / tc * tc; j0 <= last; j0 += tc) {
    const i64 bc = imin(tc, p.Nk - j0);
    // Sᵀ = K Qᵀ, K rows read in place.
    if (few && j0 + kFewPrefetchKeys <= last) {
      const i64 jp = j0 + kFewPrefetchKeys, rp = imin(tc, last + 1 - jp);
      prefetch_rows(t.k.data + off(t.k, b, g, jp, 0), t.k.stride[2], rp, Dk);
      if (v_direct) prefetch_rows(t.v.data + off(t.v, b, g, jp, 0), t.v.stride[2], rp, Dv);
    }
    if (few) {
      scores_few_lanes(t.k.data + off(t.k, b, g, j0, 0), t.k.stride[2], bc, Dk, QT, Dk, n, ST, np);
    } else {
      gemm<false, false>(bc, np, Dk, t.k.data + off(t.k, b, g, j0, 0), t.k.stride[2], t.k.stride[3], QT, np, ST, np);
    }
    scale_softcap(p, ST, np, bc, np, nullptr);
    if (ex || (st && !(row_lo(p, i_max) <= j0 && row_hi(p, i_min) >= j0 + bc - 1)))
      for (i64 r = 0; r < n; ++r) {
        const i64 i = li[r], lo = st ? row_lo(p, i) : 0, hi = st ? row_hi(p, i) : p.Nk - 1;
        for (i64 c = 0; c < bc; ++c) {
          float& x = ST[c * np + r];
          const i64 j = j0 + c;
          if (j < lo || j > hi) {
            x = kNegInf;
          } else if (ex) {
            const float bias = bias_at(p, b, lh[r], i, j);
            x = bias == kNegInf ? kNegInf : x + bias;
          }
        }
      }
    // Online softmax down the key rows, W lanes at a time.
    for (i64 rv = 0; rv < np; rv += W) {
      R vm = neg_inf;
      for (i64 c = 0; c < bc; ++c) vm = Vec::max_ignore_nan(Vec::load(ST + c * np + rv), vm);
      const R m_old = Vec::load(m + rv);
      const R m_new = Vec::max_ignore_nan(vm, m_old);
      const R shift = Vec::select_gt(m_new, neg_inf, m_new, Vec::zero());  // all masked so far: exp(-inf - 0) = 0
      R sum = Vec::zero();
      for (i64 c = 0; c < bc; ++c) {
        const R e = Vec::exp(Vec::sub(Vec::load(ST + c * np + rv), shift));
        Vec::store(ST + c * np + rv, e);
        sum = Vec::add(sum, e);
      }
      const R alpha = Vec::exp(Vec::sub(m_old, shift));  // rescales what came before
      Vec::store(al + rv, alpha);
      Vec::store(l + rv, Vec::fma(Vec::load(l + rv), alpha, sum));
      Vec::store(m + rv, m_new);
    }
    for (i64 r = 0; r < n; ++r)
      if (al[r] != 1.0f) {
        const R av = Vec::set1(al[r]);
        for (i64 e = 0; e < dvp; e += W) Vec::store(O + r * dvp + e, Vec::mul(Vec::load(O + r * dvp + e), av));
      }
    // O += P V, P read down its columns (A[r][c] = ST[c·np + r]).
    const float* Vr = Vp;
    i64 ldv = dvp, nv = dvp;
    if (v_direct && few) {
      // Decoding: the tile's V is read once, by the GEMM itself. A non-finite O afterwards
      // (rare: a NaN or inf in V or already in O) redoes the tile from a copy of O with
      // zero weights skipped, which is what the scan-first path computes.
      Vr = t.v.data + off(t.v, b, g, j0, 0), ldv = t.v.stride[2], nv = Dv;
      float* Osave = Vp;  // unused when V is read in place
      for (i64 x = 0; x < n * dvp; ++x) Osave[x] = O[x];
      gemm<true, false>(n, nv, bc, ST, 1, np, Vr, ldv, O, dvp);
      if (!rows_finite(O, dvp, n, nv)) {
        for (i64 x = 0; x < n * dvp; ++x) O[x] = Osave[x];
        gemm<true, true>(n, nv, bc, ST, 1, np, Vr, ldv, O, dvp);
      }
      continue;
    }
    bool v_finite;
    if (v_direct) {
      Vr = t.v.data + off(t.v, b, g, j0, 0), ldv = t.v.stride[2], nv = Dv;
      v_finite = rows_finite(Vr, ldv, bc, Dv);
    } else {
      v_finite = pack_rows(t.v, b, g, j0, bc, Dv, Vp, dvp);
    }
    if (v_finite)
      gemm<true, false>(n, nv, bc, ST, 1, np, Vr, ldv, O, dvp);
    else
      gemm<true, true>(n, nv, bc, ST, 1, np, Vr, ldv, O, dvp);
  }

  for (i64 r = 0; r < n; ++r) finish_row(p, t, it, b, lh[r], li[r], r, m[r], l[r], O + r * dvp);
}

// ---------------------------------------------------------------------------------------
// Backward. With P recomputed from lse and delta_i = Σ_e dout_ie out_ie:
//   dS = P ∘ (dout Vᵀ − delta) (0 where P = 0),  dX = β (1 − t²) dS  (t: soft-cap tanh)
//   dV = Pᵀ dout,  dK = dXᵀ Q,  dQ = dX K

// Row constants of one query tile: lse with -inf replaced by +inf (so exp(s - L) = 0 on an
// empty row, and on padding rows), and delta (0 on padding).
inline void load_row_constants(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 h, i64 i0, i64 br,
                               i64 n, float* L, float* Dl) {
  for (i64 r = 0; r < n; ++r) {
    if (r < br) {
      const float lse = t.lse_in.data[off3(t.lse_in, b, h, i0 + r)];
      L[r] = lse == kNegInf ? kPosInf : lse;
      Dl[r] = delta[(b * p.Hq + h) * p.Nq + i0 + r];
    } else {
      L[r] = kPosInf;
      Dl[r] = 0.0f;
    }
  }
}

// dX from P (in S), dP and the soft-cap tanh, over rows × cols of a tile, per-row
// constants along rows (row_const = true) or along columns (pass A's transposed tile).
template <bool ROW_CONST>
inline void ds_from_p(const Problem& p, const float* S, float* dP, const float* T, const float* Dl, i64 ld, i64 rows,
                      i64 cols) {
  const R beta = Vec::set1(static_cast<float>(p.scale));
  const R one = Vec::set1(1.0f);
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; c += W) {
      const R P = Vec::load(S + r * ld + c);
      const R D = ROW_CONST ? Vec::set1(Dl[r]) : Vec::load(Dl + c);
      R ds = Vec::mul(Vec::mul(P, Vec::sub(Vec::load(dP + r * ld + c), D)), beta);
      if (p.has_softcap) {
        const R tt = Vec::load(T + r * ld + c);
        ds = Vec::mul(ds, Vec::sub(one, Vec::mul(tt, tt)));
      }
      Vec::store(dP + r * ld + c, Vec::zero_where_zero(P, ds));
    }
}

std::size_t backward_scratch(const Problem& p) {
  const i64 dkp = round_up(p.Dk, kPad), dvp = round_up(p.Dv, kPad);
  const i64 T = kTileRows > kTileCols ? kTileRows : kTileCols;
  // Pass A: KT, VT (D × bcp), rows of Q and dout when not read in place (br × Dpad), S, T, dP
  // (br × bcp), dK, dV accumulators (bc × Dpad), L, Dl. Pass B needs no more than that.
  const i64 n = T * (p.Dk + p.Dv) + T * (dkp + dvp) + 3 * T * T + T * (dkp + dvp) + 2 * T + 16 * kPad;
  return static_cast<std::size_t>(n);
}

// Rows [r0, r0 + n) of (b, h) as a B operand: in place when the rows are unit-stride and
// D is a multiple of the vector width (ld = the tensor's row stride, cols = D), else
// packed into buf (ld = cols = D padded to kPad). finite: whether all n × D values are.
struct RowsOperand {
  const float* p;
  i64 ld, cols;
  bool finite;
};
inline RowsOperand rows_operand(const View4<const float>& x, i64 b, i64 h, i64 r0, i64 n, i64 D, float* buf) {
  if (x.stride[3] == 1 && D % W == 0) {
    const float* p = x.data + off(x, b, h, r0, 0);
    return {p, x.stride[2], D, rows_finite(p, x.stride[2], n, D)};
  }
  const i64 ld = round_up(D, kPad);
  const bool finite = pack_rows(x, b, h, r0, n, D, buf, ld);
  return {buf, ld, ld, finite};
}

// Masks on a transposed tile (element (c, r) is key j0 + c for query i0 + r).
inline void mask_transposed(const Problem& p, float* ST, i64 ld, i64 b, i64 h, i64 i0, i64 br, i64 j0, i64 bc) {
  const bool st = structural(p), ex = explicit_mask(p);
  for (i64 r = 0; r < br; ++r) {
    const i64 i = i0 + r, lo = st ? row_lo(p, i) : 0, hi = st ? row_hi(p, i) : p.Nk - 1;
    for (i64 c = 0; c < bc; ++c) {
      float& x = ST[c * ld + r];
      const i64 j = j0 + c;
      if (j < lo || j > hi) {
        x = kNegInf;
      } else if (ex) {
        const float bias = bias_at(p, b, h, i, j);
        x = bias == kNegInf ? kNegInf : x + bias;
      }
    }
  }
}

// Pass A: one key tile of kv head g (dk, dv); loops over the group's query heads and
// query tiles. Tiles in the row layout (query rows × keys): Kᵀ and Vᵀ are packed once,
// Q and dout rows are read in place, as the A operand of S = Q Kᵀ and dP = dout Vᵀ and
// the B operand of dV += Pᵀ dout and dK += dXᵀ Q.
void backward_kv_tile(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 g, i64 j0, float* scratch) {
  const i64 Dk = p.Dk, Dv = p.Dv, dkp = round_up(Dk, kPad), dvp = round_up(Dv, kPad);
  const i64 bc = imin(kTileCols, p.Nk - j0), bcp = round_up(bc, kPad);
  constexpr i64 BR = kTileRows;
  Carve cv{scratch};
  float* KT = cv.take(Dk * kTileCols);   // (Dk, bcp)
  float* VT = cv.take(Dv * kTileCols);   // (Dv, bcp)
  float* Qb = cv.take(BR * dkp);         // Q rows, when not read in place
  float* dOb = cv.take(BR * dvp);        // dout rows, when not read in place
  float* S = cv.take(BR * kTileCols);    // (br, bcp): P
  float* T = cv.take(BR * kTileCols);    // (br, bcp): soft-cap tanh
  float* dP = cv.take(BR * kTileCols);   // (br, bcp): dP, then dX
  float* dK = cv.take(kTileCols * dkp);  // (bc, dkp)
  float* dV = cv.take(kTileCols * dvp);  // (bc, dvp)
  float* L = cv.take(BR);
  float* Dl = cv.take(BR);

  pack_transposed(t.k, b, g, j0, bc, Dk, KT, bcp);
  pack_transposed(t.v, b, g, j0, bc, Dv, VT, bcp);
  for (i64 x = 0; x < bc * dkp; ++x) dK[x] = 0.0f;
  for (i64 x = 0; x < bc * dvp; ++x) dV[x] = 0.0f;
  const bool st = structural(p);

  for (i64 h = g * p.group; h < (g + 1) * p.group; ++h)
    for (i64 i0 = 0; i0 < p.Nq; i0 += BR) {
      const i64 br = imin(BR, p.Nq - i0);
      if (st && (row_hi(p, i0 + br - 1) < j0 || row_lo(p, i0) > j0 + bc - 1)) continue;  // tile fully masked
      load_row_constants(p, t, delta, b, h, i0, br, br, L, Dl);
      // S = Q Kᵀ and dP = dout Vᵀ, Q and dout rows broadcast in place.
      gemm<false, false>(br, bcp, Dk, t.q.data + off(t.q, b, h, i0, 0), t.q.stride[2], t.q.stride[3], KT, bcp, S, bcp);
      scale_softcap(p, S, bcp, br, bcp, T);
      if (tile_needs_mask(p, i0, br, j0, bc, bcp)) mask_rows(p, S, bcp, b, h, i0, br, j0, bc, bcp);
      for (i64 r = 0; r < br; ++r) {  // P = exp(s - lse_r)
        const R Lr = Vec::set1(L[r]);
        for (i64 c = 0; c < bcp; c += W)
          Vec::store(S + r * bcp + c, Vec::exp(Vec::sub(Vec::load(S + r * bcp + c), Lr)));
      }
      gemm<false, false>(br, bcp, Dv, t.dout.data + off(t.dout, b, h, i0, 0), t.dout.stride[2], t.dout.stride[3], VT,
                         bcp, dP, bcp);
      ds_from_p<true>(p, S, dP, T, Dl, bcp, br, bcp);
      // dV += Pᵀ dout and dK += dXᵀ Q: A[c][r] = tile[r·bcp + c].
      const RowsOperand dOr = rows_operand(t.dout, b, h, i0, br, Dv, dOb);
      if (dOr.finite)
        gemm<true, false>(bc, dOr.cols, br, S, 1, bcp, dOr.p, dOr.ld, dV, dvp);
      else
        gemm<true, true>(bc, dOr.cols, br, S, 1, bcp, dOr.p, dOr.ld, dV, dvp);
      const RowsOperand Qr = rows_operand(t.q, b, h, i0, br, Dk, Qb);
      if (Qr.finite)
        gemm<true, false>(bc, Qr.cols, br, dP, 1, bcp, Qr.p, Qr.ld, dK, dkp);
      else
        gemm<true, true>(bc, Qr.cols, br, dP, 1, bcp, Qr.p, Qr.ld, dK, dkp);
    }

  for (i64 c = 0; c < bc; ++c) {
    for (i64 d = 0; d < Dk; ++d) t.dk.data[off(t.dk, b, g, j0 + c, d)] = dK[c * dkp + d];
    for (i64 e = 0; e < Dv; ++e) t.dv.data[off(t.dv, b, g, j0 + c, e)] = dV[c * dvp + e];
  }
}

// Pass B: dq of one query tile; loops over the key tiles it can see. Tiles in the
// transposed layout (keys × query lanes): Qᵀ and doutᵀ are packed once, K and V rows are
// read in place, as the A operand of Sᵀ = K Qᵀ and dPᵀ = V doutᵀ and the B operand of
// dQ += dX K.
void backward_q_tile(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 h, i64 i0, float* scratch) {
  const i64 g = h / p.group, Dk = p.Dk, Dv = p.Dv, dkp = round_up(Dk, kPad);
  const i64 br = imin(kTileRows, p.Nq - i0), brp = round_up(br, kPad);
  constexpr i64 BC = kTileCols;
  Carve cv{scratch};
  float* QT = cv.take(Dk * kTileRows);   // (Dk, brp)
  float* dOT = cv.take(Dv * kTileRows);  // (Dv, brp)
  float* Kb = cv.take(BC * dkp);         // K rows, when not read in place
  float* ST = cv.take(BC * kTileRows);   // (bc, brp): P transposed
  float* TT = cv.take(BC * kTileRows);   // soft-cap tanh
  float* dPT = cv.take(BC * kTileRows);  // dP, then dX, transposed
  float* dQ = cv.take(kTileRows * dkp);  // (br, dkp)
  float* L = cv.take(kTileRows);
  float* Dl = cv.take(kTileRows);

  pack_transposed(t.q, b, h, i0, br, Dk, QT, brp);
  pack_transposed(t.dout, b, h, i0, br, Dv, dOT, brp);
  load_row_constants(p, t, delta, b, h, i0, br, brp, L, Dl);
  for (i64 x = 0; x < br * dkp; ++x) dQ[x] = 0.0f;

  i64 first, last;
  key_range(p, i0, br, first, last);
  for (i64 j0 = first / BC * BC; j0 <= last; j0 += BC) {
    const i64 bc = imin(BC, p.Nk - j0);
    gemm<false, false>(bc, brp, Dk, t.k.data + off(t.k, b, g, j0, 0), t.k.stride[2], t.k.stride[3], QT, brp, ST, brp);
    scale_softcap(p, ST, brp, bc, brp, TT);
    if (explicit_mask(p) || (structural(p) && !(row_lo(p, i0 + br - 1) <= j0 && row_hi(p, i0) >= j0 + bc - 1)))
      mask_transposed(p, ST, brp, b, h, i0, br, j0, bc);
    for (i64 c = 0; c < bc; ++c)  // P = exp(s - lse), L along the lanes (+inf on padding lanes)
      for (i64 r = 0; r < brp; r += W)
        Vec::store(ST + c * brp + r, Vec::exp(Vec::sub(Vec::load(ST + c * brp + r), Vec::load(L + r))));
    gemm<false, false>(bc, brp, Dv, t.v.data + off(t.v, b, g, j0, 0), t.v.stride[2], t.v.stride[3], dOT, brp, dPT, brp);
    ds_from_p<false>(p, ST, dPT, TT, Dl, brp, bc, brp);
    // dQ += dX K: A[r][c] = dXᵀ[c·brp + r].
    const RowsOperand Kr = rows_operand(t.k, b, g, j0, bc, Dk, Kb);
    if (Kr.finite)
      gemm<true, false>(br, Kr.cols, bc, dPT, 1, brp, Kr.p, Kr.ld, dQ, dkp);
    else
      gemm<true, true>(br, Kr.cols, bc, dPT, 1, brp, Kr.p, Kr.ld, dQ, dkp);
  }

  for (i64 r = 0; r < br; ++r)
    for (i64 d = 0; d < Dk; ++d) t.dq.data[off(t.dq, b, h, i0 + r, d)] = dQ[r * dkp + d];
}

void exp_n(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) Vec::store(y + i, Vec::exp(Vec::load(x + i)));
}
void tanh_n(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) Vec::store(y + i, Vec::tanh(Vec::load(x + i)));
}

const FastKernels& table() {
  static const FastKernels k{forward_scratch, backward_scratch, forward_item, backward_kv_tile, backward_q_tile, exp_n,
                             tanh_n};
  return k;
}
