// fast_kernel.inl — the tiled online-softmax kernel (FlashAttention-2 structure): the
// GEMMs, the forward's two tile loops and the one dispatcher that picks an item's loop, and
// the two backward passes. Written once against a `Vec` (simd_*.hpp) and included inside
// one namespace per ISA after kernel_common.inl (fast_{scalar,avx2,avx512}.cpp), whose
// helpers it uses for everything the loops share: the visible keys, the masks, the online
// softmax step, the scratch arena, the write of a finished row.
//
// Notation: a tile has `br` query rows (r) and `bc` keys (c); i = i0 + r, j = j0 + c.
// Vector dimensions are padded to a multiple of kPad with zeros.

// ---------------------------------------------------------------------------------------
// C (+)= A·B: C (M × N), A (M × K) with strides (ars, acs), B (K × N) rows of ldb.
// N is a multiple of W. Register-blocked MR rows × NV vectors.
template <int MR, int NV, bool ACC>
inline void gemm_block(i64 K, const float* A, i64 ars, i64 acs, const float* B, i64 ldb, float* C, i64 ldc) {
  R acc[MR][NV];
  SDPA_UNROLL
  for (int r = 0; r < MR; ++r) {
    SDPA_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = ACC ? Vec::load(C + r * ldc + v * W) : Vec::zero();
  }
  for (i64 k = 0; k < K; ++k) {
    R bv[NV];
    SDPA_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = Vec::load(B + k * ldb + v * W);
    SDPA_UNROLL
    for (int r = 0; r < MR; ++r) {
      const R a = Vec::set1(A[r * ars + k * acs]);
      SDPA_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = Vec::fma(a, bv[v], acc[r][v]);
    }
  }
  SDPA_UNROLL
  for (int r = 0; r < MR; ++r) {
    SDPA_UNROLL
    for (int v = 0; v < NV; ++v) Vec::store(C + r * ldc + v * W, acc[r][v]);
  }
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
    static_assert(MR <= 6, "extend the switch below");
    switch (M - m0) {
      case 1: gemm_rows<1, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc); break;
      case 2: gemm_rows<2, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc); break;
      case 3: gemm_rows<3, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc); break;
      case 4:
        if constexpr (MR > 4) gemm_rows<4, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc);
        break;
      case 5:
        if constexpr (MR > 5) gemm_rows<5, ACC>(nv, K, a, ars, acs, B + n0, ldb, c, ldc);
        break;
      default: break;
    }
  }
}

// Whether every element of rows [0, n) (width D, row stride ld, unit stride along D) is
// finite: Σ x·0 is NaN as soon as one x is ±inf or NaN.
inline bool rows_finite(const float* x, i64 ld, i64 n, i64 D) {
  // Eight rows at a time, one accumulator each: one chain through all n·D/W FMAs would
  // be bound by the FMA latency (and cost as much as a decoding tile's arithmetic).
  const R z = Vec::zero();
  R a[8] = {z, z, z, z, z, z, z, z};
  const i64 d_vec = D / W * W;
  float tail = 0.0f;
  i64 c = 0;
  for (; c + 8 <= n; c += 8)
    for (i64 d = 0; d < d_vec; d += W)
      for (int u = 0; u < 8; ++u) a[u] = Vec::fma(Vec::load(x + (c + u) * ld + d), z, a[u]);
  for (; c < n; ++c)
    for (i64 d = 0; d < d_vec; d += W) a[0] = Vec::fma(Vec::load(x + c * ld + d), z, a[0]);
  for (i64 r = 0; r < n; ++r)
    for (i64 d = d_vec; d < D; ++d) tail += x[r * ld + d] * 0.0f;
  const R s = Vec::add(Vec::add(Vec::add(a[0], a[1]), Vec::add(a[2], a[3])),
                       Vec::add(Vec::add(a[4], a[5]), Vec::add(a[6], a[7])));
  return is_finite(Vec::hsum(s) + tail);
}

// What is known of a GEMM's B operand: all finite, not all finite, or not looked at.
enum class Finite { yes, no, unknown };

// C (M × N) += A·B without a zero weight in A ever multiplying an inf or NaN in B: a
// masked key's weight is 0, and 0·NaN = NaN would leak its value into rows that cannot
// see it. B finite: the register-blocked GEMM. B not finite: term by term, zero weights
// skipped. Unknown: the blocked GEMM, and only if C then holds a non-finite value (rare:
// a NaN or inf in B, or already in C) C is restored from C_saved (M × ldc floats of the
// caller's scratch) and redone term by term; that costs a copy of C instead of a scan of B.
inline void gemm_acc_skip_zero(Finite b_finite, i64 M, i64 N, i64 K, const float* A, i64 ars, i64 acs, const float* B,
                               i64 ldb, float* C, i64 ldc, float* C_saved) {
  if (b_finite == Finite::yes) return gemm<true, false>(M, N, K, A, ars, acs, B, ldb, C, ldc);
  if (b_finite == Finite::no) return gemm<true, true>(M, N, K, A, ars, acs, B, ldb, C, ldc);
  for (i64 x = 0; x < M * ldc; ++x) C_saved[x] = C[x];
  gemm<true, false>(M, N, K, A, ars, acs, B, ldb, C, ldc);
  if (rows_finite(C, ldc, M, N)) return;
  for (i64 x = 0; x < M * ldc; ++x) C[x] = C_saved[x];
  gemm<true, true>(M, N, K, A, ars, acs, B, ldb, C, ldc);
}

// ---------------------------------------------------------------------------------------
// Score post-processing: s = β x, then soft-cap (t = tanh(s/c) saved when T != null).
inline void scale_softcap(const Problem& p, float* S, i64 ld, i64 rows, i64 cols, float* T) {
  const R beta = Vec::set1(static_cast<float>(p.scale));
  const R cap = Vec::set1(static_cast<float>(p.softcap));
  const R inv_cap = Vec::set1(static_cast<float>(1.0 / p.softcap));
  if (!p.has_softcap) {  // the common case: a plain loop, no soft-cap test per vector
    for (i64 r = 0; r < rows; ++r)
      for (i64 c = 0; c < cols; c += W) Vec::store(S + r * ld + c, Vec::mul(Vec::load(S + r * ld + c), beta));
    return;
  }
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

// Packs keys [j0, j0+bc) of (b, g) transposed: KT[d][c] (Dk × ld), zero columns up to ld.
// 16-bit keys are widened row by row (load_row).
inline void pack_transposed(const InView& x, i64 b, i64 g, i64 j0, i64 bc, i64 D, float* out, i64 ld) {
  if (x.dtype != Dtype::f32) {
    for (i64 c = 0; c < bc; ++c) load_row(x, off(x, b, g, j0 + c, 0), D, out + c, ld);
    for (i64 d = 0; d < D; ++d)
      for (i64 c = bc; c < ld; ++c) out[d * ld + c] = 0.0f;
    return;
  }
  for (i64 d = 0; d < D; ++d) {
    float* o = out + d * ld;
    for (i64 c = 0; c < bc; ++c) o[c] = x.data[off(x, b, g, j0 + c, d)];
    for (i64 c = bc; c < ld; ++c) o[c] = 0.0f;
  }
}
// Packs rows [j0, j0+n) of (b, g) as rows of ld floats, zero-padded; returns whether all
// finite (rows copied or widened by vectors: only when `scan`, else true).
inline bool pack_rows(const InView& x, i64 b, i64 g, i64 j0, i64 n, i64 D, float* out, i64 ld, bool scan = true) {
  if (x.dtype != Dtype::f32) {  // widened by the vector converters, then one vector scan
    if (x.stride[3] == 1 && x.stride[2] == D && ld == D) {
      // Rows back to back on both sides: one converter call for the tile. Per row, the
      // calls were 3 % of a bf16 forward's samples at D = 64 (docs/performance.md).
      load_row(x, off(x, b, g, j0, 0), n * D, out, 1);
    } else {
      for (i64 c = 0; c < n; ++c) {
        load_row(x, off(x, b, g, j0 + c, 0), D, out + c * ld, 1);
        for (i64 d = D; d < ld; ++d) out[c * ld + d] = 0.0f;
      }
    }
    return !scan || rows_finite(out, ld, n, D);
  }
  if (x.stride[3] == 1) {  // rows of contiguous floats: copied, then one vector scan
    for (i64 c = 0; c < n; ++c) {
      const float* row = x.data + off(x, b, g, j0 + c, 0);
      float* o = out + c * ld;
      for (i64 d = 0; d < D; ++d) o[d] = row[d];
      for (i64 d = D; d < ld; ++d) o[d] = 0.0f;
    }
    return !scan || rows_finite(out, ld, n, D);
  }
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

// Whether rows of x (width D) can be a GEMM's B operand in place: fp32, unit stride along
// D, D a multiple of the vector width, and rows at most a padded row apart. The GEMM reads
// B down its rows, one vector per row; at a row stride that is a large power of two (the
// (B, N, H, D) layout seen as (B, H, N, D): H·D floats apart) those vectors all fall in a
// few L1 sets and evict each other, which cost the forward 20 % at H = 8, D = 64 (Zen 3).
// 16-bit rows are always packed (widened).
inline bool rows_in_place(const InView& x, i64 D) {
  return x.dtype == Dtype::f32 && x.stride[3] == 1 && D % W == 0 && x.stride[2] <= round_up(D, kPad);
}

// Rows [r0, r0 + n) of (b, h) as a B operand: in place when rows_in_place (ld = the
// tensor's row stride, cols = D), else packed into buf (ld = cols = D padded to kPad).
// finite: packing fp32 sees every value; rows read in place, and widened 16-bit rows, are
// scanned when scan_in_place, else left Finite::unknown for gemm_acc_skip_zero to check
// its result instead.
struct RowsOperand {
  const float* data;
  i64 ld, cols;
  Finite finite;
};
inline RowsOperand rows_operand(const InView& x, i64 b, i64 h, i64 r0, i64 n, i64 D, float* buf, bool scan_in_place) {
  if (rows_in_place(x, D)) {
    const float* rows = x.data + off(x, b, h, r0, 0);
    const Finite finite = !scan_in_place                         ? Finite::unknown
                          : rows_finite(rows, x.stride[2], n, D) ? Finite::yes
                                                                 : Finite::no;
    return {rows, x.stride[2], D, finite};
  }
  const i64 ld = round_up(D, kPad);
  if (!scan_in_place) {  // as rows read in place: no scan (K's in the forward)
    pack_rows(x, b, h, r0, n, D, buf, ld, /*scan=*/false);
    return {buf, ld, ld, Finite::unknown};
  }
  return {buf, ld, ld, pack_rows(x, b, h, r0, n, D, buf, ld) ? Finite::yes : Finite::no};
}

// Rows of (b, h) from r0 as a GEMM's A operand, element (r, d) at data[r·rs + d·cs]: fp32
// rows in place at the tensor's own strides (a_in_place); 16-bit rows as rows_operand packed
// them (a_rows), since the GEMM reads floats.
struct AOperand {
  const float* data;
  i64 rs, cs;
};
inline AOperand a_in_place(const InView& x, i64 b, i64 h, i64 r0) {
  return {x.data + off(x, b, h, r0, 0), x.stride[2], x.stride[3]};
}
inline AOperand a_rows(const RowsOperand& rows) { return {rows.data, rows.ld, 1}; }
// The one choice between them, for rows that are also a B operand (rows_operand'ed).
inline AOperand a_operand(const InView& x, i64 b, i64 h, i64 r0, const RowsOperand& rows) {
  return x.dtype == Dtype::f32 ? a_in_place(x, b, h, r0) : a_rows(rows);
}

// ---------------------------------------------------------------------------------------
// Forward, in the transposed layout: a tile holds Sᵀ (bc keys × np query lanes), so
//   Sᵀ = K·Qᵀ     reads K rows straight from the tensor,
//   O += P·V      reads V rows straight from the tensor (when rows_in_place),
// and only Q is packed, once per item. The online softmax runs down the key rows with one
// query per vector lane: no horizontal reductions. Two loops, picked by forward_item:
//   forward_tiled      Sᵀ by the register-blocked GEMM, 64 keys per tile;
//   forward_few_lanes  (at most kFewLanes lanes: decoding) Sᵀ by dot products, 32 keys per
//                      tile, K and V prefetched ahead, V's finiteness checked after P·V.
// (and on AVX2 and AVX-512, decode_kernel.inl for the few-lane items it can take.)

// What an item's lanes carry from key tile to key tile.
struct OnlineRows {
  float* O;        // (n, dvp) unnormalised output
  float* row_max;  // (np) running max
  float* row_sum;  // (np) running sum
  float* alpha;    // (np) this tile's rescale factor
  static OnlineRows carve(const Problem& p, Arena& arena, i64 lanes) {
    OnlineRows s;
    s.O = arena.take(lanes * round_up(p.Dv, kPad));
    s.row_max = arena.take(lanes);
    s.row_sum = arena.take(lanes);
    s.alpha = arena.take(lanes);
    return s;
  }
  void start(const ItemLanes& lanes, i64 dvp) const {
    for (i64 x = 0; x < lanes.n * dvp; ++x) O[x] = 0.0f;
    for (i64 r = 0; r < lanes.np; ++r) row_max[r] = kNegInf, row_sum[r] = 0.0f;
  }
  void finish(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes, i64 dvp) const {
    for (i64 r = 0; r < lanes.n; ++r)
      finish_row(p, t, it, it.b, lanes.h[r], lanes.i[r], r, row_max[r], row_sum[r], O + r * dvp);
  }
};

// The part of a key tile both loops share, between their Sᵀ (bc keys × np lanes, row
// stride np) and their P·V: scale and soft-cap, the masks, the online softmax (Sᵀ becomes
// P), dropout (Sᵀ becomes P∘M, M = keep/(1 - p), in the layout of Sᵀ: the buffer `drop`),
// and O's rows rescaled by the change of their lane's max (unless !rescale_rows: the
// caller keeps O in another layout and rescales it by rows.alpha itself).
inline void forward_tile_softmax(const Problem& p, const ItemLanes& lanes, const LanesSee& see, i64 b, i64 j0, i64 bc,
                                 float* ST, float* drop, const OnlineRows& rows, i64 dvp, bool rescale_rows = true) {
  const i64 np = lanes.np;
  const auto lane_at = [&](i64 r) { return LaneRow{lanes.h[r], lanes.i[r]}; };
  scale_softcap(p, ST, np, bc, np, nullptr);
  if (tile_needs_mask(see, j0, bc)) mask_tile(p, ST, 1, np, lanes.n, b, j0, bc, lane_at);
  for (i64 rv = 0; rv < np; rv += W) {  // W lanes at a time, down the key rows
    R m = Vec::load(rows.row_max + rv), l = Vec::load(rows.row_sum + rv);
    const R alpha = online_softmax_step(
        m, l, bc, [&](i64 c) { return Vec::load(ST + c * np + rv); }, [](R x) { return x; },
        [&](i64 c, R e) { Vec::store(ST + c * np + rv, e); });
    Vec::store(rows.alpha + rv, alpha);
    Vec::store(rows.row_sum + rv, l);
    Vec::store(rows.row_max + rv, m);
  }
  if (p.has_dropout) {  // after the row sums: they, and so lse, are those of the undropped P
    dropout_tile(p, drop, 1, np, lanes.n, b, j0, bc, lane_at);
    mul_tile(ST, np, drop, np, bc, round_up(lanes.n, W));
  }
  if (!rescale_rows) return;
  for (i64 r = 0; r < lanes.n; ++r)
    if (rows.alpha[r] != 1.0f) {
      const R av = Vec::set1(rows.alpha[r]);
      for (i64 e = 0; e < dvp; e += W) Vec::store(rows.O + r * dvp + e, Vec::mul(Vec::load(rows.O + r * dvp + e), av));
    }
}

struct TiledForwardScratch {
  float* QT;      // (Dk, np)   packed queries, lanes along rows
  float* ST;      // (bc, np)   scores, then probabilities
  float* K_rows;  // (bc, dkp)  K rows widened, for 16-bit K
  float* V_rows;  // (bc, dvp)  V rows, when not rows_in_place
  float* drop;    // (bc, np)   dropout multipliers, with dropout
  OnlineRows rows;
  static TiledForwardScratch carve(const Problem& p, Arena& arena) {
    TiledForwardScratch s;
    s.QT = arena.take(p.Dk * kTileRows);
    s.ST = arena.take(kTileCols * kTileRows);
    s.K_rows = arena.take(p.dtype == Dtype::f32 ? 0 : kTileCols * round_up(p.Dk, kPad));
    s.drop = arena.take(p.has_dropout ? kTileCols * kTileRows : 0);
    s.V_rows = arena.take(kTileCols * round_up(p.Dv, kPad));
    s.rows = OnlineRows::carve(p, arena, kTileRows);
    return s;
  }
};

void forward_tiled(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes,
                   WorkerScratch scratch) {
  const i64 b = it.b, g = it.g, Dk = p.Dk, Dv = p.Dv, dvp = round_up(Dv, kPad), n = lanes.n, np = lanes.np;
  const auto s = carve_scratch<TiledForwardScratch>(p, scratch);
  for (i64 r = 0; r < n; ++r) load_row(t.q, off(t.q, b, lanes.h[r], lanes.i[r], 0), Dk, s.QT + r, np);
  for (i64 d = 0; d < Dk; ++d)
    for (i64 r = n; r < np; ++r) s.QT[d * np + r] = 0.0f;
  s.rows.start(lanes, dvp);
  const LanesSee see = item_sees(p, b, lanes);
  const KeyRange keys = visible_keys(see, it.j_begin, it.j_end);
  for (i64 j0 = keys.first / kTileCols * kTileCols; j0 <= keys.last; j0 += kTileCols) {
    const i64 bc = imin(kTileCols, p.Nk - j0);
    // Sᵀ = K Qᵀ, K rows read in place (16-bit: widened first).
    const AOperand K = t.k.dtype == Dtype::f32
                           ? a_in_place(t.k, b, g, j0)
                           : a_rows(rows_operand(t.k, b, g, j0, bc, Dk, s.K_rows, /*scan_in_place=*/false));
    gemm<false, false>(bc, np, Dk, K.data, K.rs, K.cs, s.QT, np, s.ST, np);
    forward_tile_softmax(p, lanes, see, b, j0, bc, s.ST, s.drop, s.rows, dvp);
    // O += P V, P read down its columns (A[r][c] = ST[c·np + r]).
    const RowsOperand V = rows_operand(t.v, b, g, j0, bc, Dv, s.V_rows, /*scan_in_place=*/true);
    gemm_acc_skip_zero(V.finite, n, V.cols, bc, s.ST, 1, np, V.data, V.ld, s.rows.O, dvp, nullptr);
  }
  s.rows.finish(p, t, it, lanes, dvp);
}

// Sᵀ for a tile with few query lanes (decoding): one dot product per (key, lane), the key
// row loaded once in vector chunks and reused for every lane, then one horizontal sum.
// The GEMM form would spend a broadcast and a full-width FMA per (key, element) with most
// lanes idle. Q_rows: the n lanes' queries as rows of ldq floats. Needs unit-stride keys.
// dk_vec: Dk rounded down to whole vectors; the rest of each product is dot_tail's.
// Rows [j, j + rows) of (b, g), D elements each, prefetched into L2, one line (64 bytes) at a time.
inline void prefetch_rows(const InView& x, i64 b, i64 g, i64 j, i64 rows, i64 D) {
  const i64 size = x.dtype == Dtype::f32 ? 4 : 2;  // bytes per element
  const char* first = static_cast<const char*>(x.dtype == Dtype::f32 ? static_cast<const void*>(x.data) : x.bits) +
                      off(x, b, g, j, 0) * size;
  for (i64 r = 0; r < rows; ++r)
    for (i64 e = 0; e < D * size; e += 64) __builtin_prefetch(first + (r * x.stride[2]) * size + e, 0, 2);
}
inline float dot_tail(const float* k, const float* q, i64 dk_vec, i64 Dk) {
  float x = 0.0f;
  for (i64 e = dk_vec; e < Dk; ++e) x += k[e] * q[e];
  return x;
}
// NL lanes × 4 keys: 4·NL independent accumulator chains (an FMA's latency is hidden
// only with at least 8 in flight), each key chunk loaded once for all NL lanes.
template <int NL>
inline void scores_keys4(const float* k0, i64 ldk, i64 dk_vec, i64 Dk, const float* q, i64 ldq, float* st, i64 np) {
  const float* k[4] = {k0, k0 + ldk, k0 + 2 * ldk, k0 + 3 * ldk};
  R a[NL][4];
  for (int l = 0; l < NL; ++l)
    for (int c = 0; c < 4; ++c) a[l][c] = Vec::zero();
  for (i64 d = 0; d < dk_vec; d += W) {
    R kv[4];
    for (int c = 0; c < 4; ++c) kv[c] = Vec::load(k[c] + d);
    for (int l = 0; l < NL; ++l) {
      const R qv = Vec::load(q + l * ldq + d);
      for (int c = 0; c < 4; ++c) a[l][c] = Vec::fma(kv[c], qv, a[l][c]);
    }
  }
  for (int l = 0; l < NL; ++l)
    for (int c = 0; c < 4; ++c) st[c * np + l] = Vec::hsum(a[l][c]) + dot_tail(k[c], q + l * ldq, dk_vec, Dk);
}
template <int NL>
inline void scores_key1(const float* k, i64 dk_vec, i64 Dk, const float* q, i64 ldq, float* st) {
  R a[NL];
  for (int l = 0; l < NL; ++l) a[l] = Vec::zero();
  for (i64 d = 0; d < dk_vec; d += W) {
    const R kv = Vec::load(k + d);
    for (int l = 0; l < NL; ++l) a[l] = Vec::fma(kv, Vec::load(q + l * ldq + d), a[l]);
  }
  for (int l = 0; l < NL; ++l) st[l] = Vec::hsum(a[l]) + dot_tail(k, q + l * ldq, dk_vec, Dk);
}
// Lanes per register block: 4 × 4 accumulators + 4 keys + a query fit AVX-512's 32
// registers; AVX2's 16 take 2 lanes.
constexpr int kScoreLanes = W >= 16 ? 4 : 2;
template <int NL>
inline void scores_lane_block(const float* K, i64 ldk, i64 bc, i64 dk_vec, i64 Dk, const float* q, i64 ldq, float* st,
                              i64 np) {
  i64 c = 0;
  for (; c + 4 <= bc; c += 4) scores_keys4<NL>(K + c * ldk, ldk, dk_vec, Dk, q, ldq, st + c * np, np);
  for (; c < bc; ++c) scores_key1<NL>(K + c * ldk, dk_vec, Dk, q, ldq, st + c * np);
}
inline void scores_few_lanes(const float* K, i64 ldk, i64 bc, i64 Dk, const float* Q_rows, i64 ldq, i64 n, float* ST,
                             i64 np) {
  const i64 dk_vec = Dk / W * W;
  i64 r = 0;
  for (; r + kScoreLanes <= n; r += kScoreLanes)
    scores_lane_block<kScoreLanes>(K, ldk, bc, dk_vec, Dk, Q_rows + r * ldq, ldq, ST + r, np);
  switch (n - r) {
    case 1: scores_lane_block<1>(K, ldk, bc, dk_vec, Dk, Q_rows + r * ldq, ldq, ST + r, np); break;
    case 2: scores_lane_block<2>(K, ldk, bc, dk_vec, Dk, Q_rows + r * ldq, ldq, ST + r, np); break;
    case 3: scores_lane_block<3>(K, ldk, bc, dk_vec, Dk, Q_rows + r * ldq, ldq, ST + r, np); break;
    default: break;
  }
  for (i64 c = 0; c < bc; ++c)
    for (i64 x = n; x < np; ++x) ST[c * np + x] = 0.0f;
}

struct FewLaneForwardScratch {
  float* Q_rows;   // (n, Dk)    the lanes' queries as rows
  float* ST;       // (bc, np)   scores, then probabilities
  float* K_rows;   // (bc, dkp)  K rows widened, for 16-bit K
  float* V_rows;   // (bc, dvp)  V rows, when not rows_in_place
  float* O_saved;  // (n, dvp)   O before a tile's P·V (gemm_acc_skip_zero)
  float* drop;     // (bc, np)   dropout multipliers, with dropout
  OnlineRows rows;
  static FewLaneForwardScratch carve(const Problem& p, Arena& arena) {
    const i64 dvp = round_up(p.Dv, kPad), lanes_padded = round_up(kFewLanes, kPad);
    FewLaneForwardScratch s;
    s.Q_rows = arena.take(kFewLanes * p.Dk);
    s.ST = arena.take(kFewTileCols * lanes_padded);
    s.K_rows = arena.take(p.dtype == Dtype::f32 ? 0 : kFewTileCols * round_up(p.Dk, kPad));
    s.V_rows = arena.take(kFewTileCols * dvp);
    s.O_saved = arena.take(kFewLanes * dvp);
    s.drop = arena.take(p.has_dropout ? kFewTileCols * lanes_padded : 0);
    s.rows = OnlineRows::carve(p, arena, lanes_padded);
    return s;
  }
};

void forward_few_lanes(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes,
                       WorkerScratch scratch) {
  const i64 b = it.b, g = it.g, Dk = p.Dk, Dv = p.Dv, dvp = round_up(Dv, kPad), n = lanes.n, np = lanes.np;
  const auto s = carve_scratch<FewLaneForwardScratch>(p, scratch);
  for (i64 r = 0; r < n; ++r) load_row(t.q, off(t.q, b, lanes.h[r], lanes.i[r], 0), Dk, s.Q_rows + r * Dk, 1);
  s.rows.start(lanes, dvp);
  const LanesSee see = item_sees(p, b, lanes);
  const KeyRange keys = visible_keys(see, it.j_begin, it.j_end);
  const bool v_read = rows_in_place(t.v, Dv) || t.v.dtype != Dtype::f32;  // in place, or widened from the tensor
  for (i64 j0 = keys.first / kFewTileCols * kFewTileCols; j0 <= keys.last; j0 += kFewTileCols) {
    const i64 bc = imin(kFewTileCols, p.Nk - j0);
    if (j0 + kFewPrefetchKeys <= keys.last) {
      const i64 jp = j0 + kFewPrefetchKeys, rp = imin(kFewTileCols, keys.last + 1 - jp);
      prefetch_rows(t.k, b, g, jp, rp, Dk);
      if (v_read) prefetch_rows(t.v, b, g, jp, rp, Dv);
    }
    // K rows in place (unit stride: forward_item), 16-bit ones widened first.
    const AOperand K = t.k.dtype == Dtype::f32
                           ? a_in_place(t.k, b, g, j0)
                           : a_rows(rows_operand(t.k, b, g, j0, bc, Dk, s.K_rows, /*scan_in_place=*/false));
    scores_few_lanes(K.data, K.rs, bc, Dk, s.Q_rows, Dk, n, s.ST, np);
    forward_tile_softmax(p, lanes, see, b, j0, bc, s.ST, s.drop, s.rows, dvp);
    // O += P V. V read in place is read once, by the GEMM itself: no scan first.
    const RowsOperand V = rows_operand(t.v, b, g, j0, bc, Dv, s.V_rows, /*scan_in_place=*/false);
    gemm_acc_skip_zero(V.finite, n, V.cols, bc, s.ST, 1, np, V.data, V.ld, s.rows.O, dvp, s.O_saved);
  }
  s.rows.finish(p, t, it, lanes, dvp);
}

// The AMX loops' operands (forward_tiled_amx, the bf16 backward; compiled on every path,
// called on the AVX-512 path's AMX table only): rows [j0, j0 + n) of
// (b, g) as bf16 rows with unit stride along D: in place (row stride the tensor's), or
// gathered into buf (row stride D).
struct Bf16Rows {
  const bf16* data;
  i64 ld;
};
inline Bf16Rows bf16_rows(const InView& x, i64 b, i64 g, i64 j0, i64 n, i64 D, bf16* buf) {
  const bf16* bits = static_cast<const bf16*>(x.bits);
  if (x.stride[3] == 1) return {bits + off(x, b, g, j0, 0), x.stride[2]};
  for (i64 c = 0; c < n; ++c)
    for (i64 d = 0; d < D; ++d) buf[c * D + d] = bits[off(x, b, g, j0 + c, d)];
  return {buf, D};
}
// ... and as an A operand of whole tiles: n rows × D in place when they fill rows16 × d32
// (n, D multiples of 16 and 32) and in_place allows it, else copied with zero padding into
// buf (row stride d32).
inline Bf16Rows bf16_tile_rows(const Bf16Rows& x, i64 n, i64 D, i64 rows16, i64 d32, bf16* buf,
                               bool in_place = true) {
  if (in_place && n == rows16 && D == d32) return x;
  amx::copy_rows_padded(x.data, x.ld, n, D, rows16, d32, buf, d32);
  return {buf, d32};
}
// The backward's AMX packings, for bf16 or for fp16 split into bf16 hi + lo (amx.hpp,
// kSplitTerms): one choice per kind of operand, and `terms`, by which the split lengthens
// every contraction. Rows are 16-bit values either way (Bf16Rows moves bits). `order`: the
// split's blocks (amx::SplitOrder), by default an A operand's hi_hi_lo and a B's hi_lo_hi;
// pass B gives Q and dout (B there) and K and V (A) the orders kv_tiles gives them, so S
// and dP, and so dQ, keep the one pass's bits.
using amx::SplitOrder;
struct AmxPack {
  bool split = false;
  i64 terms = 1;
  explicit AmxPack(const Problem& p) : split(p.dtype == Dtype::fp16), terms(split ? amx::kSplitTerms : 1) {}
  static const fp16* half(const Bf16Rows& x) { return reinterpret_cast<const fp16*>(x.data); }
  void pairs_transposed(const Bf16Rows& x, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo,
                        SplitOrder order = SplitOrder::hi_lo_hi) const {
    if (split)
      amx::pack_pairs_transposed_split(half(x), x.ld, n, D, cols, out, ldo, order);
    else
      amx::pack_pairs_transposed(x.data, x.ld, n, D, cols, out, ldo);
  }
  bool rows_in_pairs(const Bf16Rows& x, i64 n, i64 D, i64 kp, std::uint32_t* out, i64 ldo) const {
    return split ? amx::pack_rows_in_pairs_split(half(x), x.ld, n, D, kp, out, ldo)
                 : amx::pack_rows_in_pairs(x.data, x.ld, n, D, kp, out, ldo);
  }
  void transposed(const float* ST, i64 rows, i64 bc, i64 kp, bf16* out, i64 ldo) const {
    if (split)
      amx::pack_transposed_bf16_split(ST, rows, bc, kp, out, ldo);
    else
      amx::pack_transposed_bf16(ST, rows, bc, kp, out, ldo);
  }
  void round_rows(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) const {
    if (split)
      amx::round_rows_bf16_split(X, ldx, n, D, rows, cols, out, ldo);
    else
      amx::round_rows_bf16(X, ldx, n, D, rows, cols, out, ldo);
  }
  // n rows × D as an A operand of whole tiles (rows16 × terms·d32, into buf unless bf16 rows
  // fill them in place).
  Bf16Rows tile_rows(const Bf16Rows& x, i64 n, i64 D, i64 rows16, i64 d32, bf16* buf, bool in_place = true,
                     SplitOrder order = SplitOrder::hi_hi_lo) const {
    if (!split) return bf16_tile_rows(x, n, D, rows16, d32, buf, in_place);
    amx::split_rows_fp16(half(x), x.ld, n, D, rows16, d32, buf, terms * d32, order);
    return {buf, terms * d32};
  }
};

// The engine's product, C (+)= A·B in amx::gemm's layouts (amx.hpp): on tiles, or by vdpbf16ps.
template <Engine16 E>
inline void engine_gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
                        bool accumulate) {
  if constexpr (E == Engine16::dot)
    amx::gemm_dot(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  else
    amx::gemm(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

// Tile configuration for the span of one item (amx::configure, amx::release), where `on`.
class AmxTiles {
 public:
  explicit AmxTiles(bool on) : on_(on) {
    if (on_) amx::configure();
  }
  ~AmxTiles() {
    if (on_) amx::release();
  }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

 private:
  bool on_;
};

#ifdef SDPA_AMX_BF16
// The tiled forward with both products on AMX-BF16 tiles (amx.hpp), for bf16 tensors: the
// same tiles and the same forward_tile_softmax as forward_tiled, in the transposed layout
// throughout, so no tile is ever transposed between the products:
//   Sᵀ = K·Qᵀ     A: K rows as they are (16 keys × 32 bf16 per tile; copied, zero-padded, when
//                 their stride or Dk does not allow that), B: Qᵀ in pairs, packed once per item;
//   Oᵀ += Vᵀ·Pᵀ   A: Vᵀ (Dv × keys), packed per key tile, B: Pᵀ in pairs, two key rows of the
//                 softmax's tile interleaved and rounded to bf16; Oᵀ's fp32 tiles loaded,
//                 accumulated and stored, rescaled by alpha one lane vector at a time, and
//                 transposed into O's rows once, at the end of the item.
// Rounding P to bf16 before P·V is what the naive bf16 implementation of the error rule
// does (reference::forward_naive). Keys, Dk and Dv are zero-padded to the tile sizes. A key
// tile whose V holds an inf or NaN takes an fp32 P·V that skips zero weights (a masked key
// must not turn O into NaN through 0·inf), as forward_tiled's does.
// Keys per tile of the AMX forward: twice forward_tiled's. Oᵀ += Vᵀ·Pᵀ then sums 128 keys
// per load and store of Oᵀ's tiles, whose K of 64 left the tile unit waiting on them (a
// 64 × 64 × 64 product with C loaded runs at 25 % of the tile peak, 33 % at K = 128, on one
// Xeon thread); the softmax's tile, 128 × 64 floats, still fits in L1 beside the rest.
constexpr i64 kAmxKeys = 2 * kTileCols;
// fp16 runs the same loop on bf16 tiles, each operand split into hi + lo (AmxPack::terms):
// its contraction dimensions (Dk for Sᵀ, the keys for Oᵀ) are 3× as long.
struct AmxForwardScratch {
  std::uint32_t* QT;  // (terms·dk32/2, np)  Qᵀ in pairs: (Q[r][2k], Q[r][2k+1]) at [k][r]
  bf16* K_rows;       // (bc16, terms·dk32)  K rows, when not read in place (fp16: always, split)
  float* ST;          // (bc16, np)    scores, then probabilities
  std::uint32_t* PT;  // (terms·kAmxKeys/2, np)  Pᵀ in pairs
  bf16* VT;           // (dvp, terms·kAmxKeys)   Vᵀ, when not packed for the call
  bf16* VT16;         // (dvp, kTileCols)  fp16: Vᵀ before its split
  float* OT;          // (dvp, np)     Oᵀ, unnormalised
  bf16* rows16;       // (kAmxKeys, max(Dk, Dv))  the lanes' Q rows; K or V rows gathered, when not unit stride
  float* V_rows;      // (bc, dvp)     V widened, for a key tile with non-finite V
  float* QTf;         // (Dk, np)      fp16: Qᵀ widened, for Sᵀ of a tile with non-finite K or Q
  float* K_rows_f;    // (bc, dkp)     fp16: K widened, likewise
  float* drop;        // (bc, np)      dropout multipliers, with dropout
  OnlineRows rows;
  static AmxForwardScratch carve(const Problem& p, Arena& arena) {
    const i64 dk32 = round_up(p.Dk, 32), dvp = round_up(p.Dv, kPad), terms = AmxPack(p).terms;
    const auto halves = [&](i64 n) { return arena.take((n + 1) / 2); };  // n 16-bit values
    AmxForwardScratch s;
    s.QT = reinterpret_cast<std::uint32_t*>(arena.take(terms * dk32 / 2 * kTileRows));
    s.K_rows = reinterpret_cast<bf16*>(halves(kAmxKeys * terms * dk32));
    s.ST = arena.take(kAmxKeys * kTileRows);
    s.PT = reinterpret_cast<std::uint32_t*>(arena.take(terms * kAmxKeys / 2 * kTileRows));
    s.VT = reinterpret_cast<bf16*>(halves(dvp * terms * kAmxKeys));
    s.VT16 = reinterpret_cast<bf16*>(halves(terms > 1 ? dvp * kTileCols : 0));
    s.OT = arena.take(dvp * kTileRows);
    s.rows16 = reinterpret_cast<bf16*>(halves(kAmxKeys * imax(p.Dk, p.Dv)));
    s.V_rows = arena.take(kAmxKeys * dvp);
    s.QTf = arena.take(terms > 1 ? p.Dk * kTileRows : 0);
    s.K_rows_f = arena.take(terms > 1 ? kAmxKeys * round_up(p.Dk, kPad) : 0);
    s.drop = arena.take(p.has_dropout ? kAmxKeys * kTileRows : 0);
    s.rows = OnlineRows::carve(p, arena, kTileRows);
    return s;
  }
};

// Vᵀ of key tile [j0, j0 + kTileCols) of (b, g): (dvp, terms·kp) bf16 at out, row stride ld;
// rows16 (kTileCols × Dv) gathers V rows that are not unit stride, VT16 (dvp × kTileCols)
// holds fp16's Vᵀ before its split. Returns whether all finite.
inline bool pack_vt_tile(const Problem& p, const Tensors& t, i64 b, i64 g, i64 j0, bf16* out, i64 ld, bf16* rows16,
                         bf16* VT16) {
  const i64 bc = imin(kTileCols, p.Nk - j0), kp = round_up(bc, 32);
  const Bf16Rows v_rows = bf16_rows(t.v, b, g, j0, bc, p.Dv, rows16);
  if (p.dtype != Dtype::fp16) return amx::pack_transposed_rows(v_rows.data, v_rows.ld, bc, p.Dv, kp, out, ld);
  const i64 dvp = round_up(p.Dv, kPad);
  const bool finite = amx::pack_transposed_rows(v_rows.data, v_rows.ld, bc, p.Dv, kp, VT16, kTileCols, 0x7C00);
  amx::split_rows_fp16(reinterpret_cast<const fp16*>(VT16), kTileCols, dvp, kp, dvp, kp, out, ld);
  return finite;
}
// The whole call's Vᵀ (Tensors::v_packed), for bf16 and fp16: per (b, g) dvp rows of the
// keys rounded up to 32 (fp16: 3× that, split), the row stride an odd number of 64-byte
// lines (a tile's 16 rows then fall in 16 L1 sets, not one: at Nk = 4096 the bare stride is
// 8 KiB).
// Scratch per worker: rows16 (kTileCols × Dv) and VT16 (dvp × kTileCols), as pack_vt_tile takes them.
// fp16's K split into (hi, hi, lo) chunks (Tensors::k_packed): the A operand of Sᵀ = K·Qᵀ as
// forward_tiled_amx splits it per key tile, rows of terms·dk32 (its row stride there too),
// round_up(Nk, 16) rows per (b, g), zero past Nk. bf16's K is read in place. Scratch:
// rows16 (kTileCols × Dk), for rows that are not unit stride.
template <Engine16 E>
PackLayout forward_pack_layout_on(const Problem& p, PackedOperand which) {
  if (!engine_takes(E, p.dtype)) return {};
  const i64 terms = AmxPack(p).terms;
  if (which == PackedOperand::k) {
    if (terms == 1) return {};
    const i64 ld = terms * round_up(p.Dk, 32);
    return {ld, round_up(p.Nk, 16) * ld, kTileCols * p.Dk};
  }
  const i64 lines = terms * round_up(p.Nk, 32) / 32, ld = (lines % 2 == 0 ? lines + 1 : lines) * 32;
  const i64 dvp = round_up(p.Dv, kPad);
  return {ld, dvp * ld, kTileCols * p.Dv + dvp * kTileCols};
}
// Key tile [j0, j0 + kTileCols) of fp16's K split into (hi, hi, lo) chunks, into k_rows (its
// first row, row stride ld); whether its values are all finite.
inline bool split_k_tile(const Problem& p, const Tensors& t, i64 b, i64 g, i64 j0, bf16* k_rows, i64 ld, bf16* rows16) {
  const i64 bc = imin(kTileCols, p.Nk - j0);
  const Bf16Rows x = bf16_rows(t.k, b, g, j0, bc, p.Dk, rows16);
  return amx::split_rows_fp16(reinterpret_cast<const fp16*>(x.data), x.ld, bc, p.Dk, round_up(bc, 16),
                              round_up(p.Dk, 32), k_rows, ld);
}
bool forward_pack_tile_amx(const Problem& p, const Tensors& t, PackedOperand which, i64 b, i64 g, i64 j0, void* head,
                           i64 ld, void* scratch) {
  bf16* rows16 = static_cast<bf16*>(scratch);
  if (which == PackedOperand::k) return split_k_tile(p, t, b, g, j0, static_cast<bf16*>(head) + j0 * ld, ld, rows16);
  return pack_vt_tile(p, t, b, g, j0, static_cast<bf16*>(head) + AmxPack(p).terms * j0, ld, rows16,
                      rows16 + kTileCols * p.Dv);
}
// Whether key tiles [j0, j0 + bc) of head `head` are all finite, by a packed operand's flags.
inline bool packed_tiles_finite(const Packed16& x, i64 head, i64 j0, i64 bc) {
  bool finite = true;
  for (i64 j = j0; j < j0 + bc; j += kTileCols) finite &= x.finite[head * x.tiles + j / kTileCols] != 0;
  return finite;
}

template <Engine16 E>
void forward_tiled_amx(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes,
                       WorkerScratch scratch) {
  const i64 b = it.b, g = it.g, Dk = p.Dk, Dv = p.Dv, dvp = round_up(Dv, kPad), n = lanes.n, np = lanes.np;
  const i64 dk32 = round_up(Dk, 32), terms = AmxPack(p).terms;
  const bool split = terms > 1;
  bool qt_widened = false;  // s.QTf holds the item's Qᵀ (fp16's widened Sᵀ, built once)
  const auto s = carve_scratch<AmxForwardScratch>(p, scratch);
  // Qᵀ in pairs (fp16: split into (hi, lo, hi) chunks), lanes and Dk zero-padded: the
  // lanes' rows gathered into rows16 (n × Dk 16-bit values), then packed by the vector
  // packers. A scalar split of every element here was a fifth of the fp16 forward at
  // N = 1024 (one thread, Xeon).
  const std::uint16_t* q_bits = static_cast<const std::uint16_t*>(t.q.bits);
  std::uint16_t* q_rows = reinterpret_cast<std::uint16_t*>(s.rows16);
  std::uint16_t q_special = 0;  // fp16: an inf or NaN among the queries: every Sᵀ widened (see amx::split_rows_fp16)
  for (i64 r = 0; r < n; ++r) {
    const i64 at = off(t.q, b, lanes.h[r], lanes.i[r], 0);
    for (i64 d = 0; d < Dk; ++d) {
      const std::uint16_t x = q_bits[at + d * t.q.stride[3]];
      q_rows[r * Dk + d] = x;
      if (split) q_special |= static_cast<std::uint16_t>((x & 0x7C00) == 0x7C00);
    }
  }
  const bool q_finite = !split || q_special == 0;
  if (split)
    amx::pack_pairs_transposed_split(reinterpret_cast<const fp16*>(q_rows), Dk, n, Dk, np, s.QT, np,
                                     SplitOrder::hi_lo_hi);
  else
    amx::pack_pairs_transposed(s.rows16, Dk, n, Dk, np, s.QT, np);
  s.rows.start(lanes, dvp);
  for (i64 x = 0; x < dvp * np; ++x) s.OT[x] = 0.0f;
  const LanesSee see = item_sees(p, b, lanes);
  const KeyRange keys = visible_keys(see, it.j_begin, it.j_end);
  const AmxTiles tiles(E == Engine16::amx);
  // Key tiles of kAmxKeys from a multiple of kTileCols (a split's keys start at one), never
  // past the item's last key; a tile that a mask cuts (the causal diagonal, a window's
  // edges) is kTileCols keys, so less of what the mask hides is computed (causal N = 1024,
  // D = 64: 128-key tiles there were 18 % slower).
  i64 bc = 0;
  for (i64 j0 = keys.first / kTileCols * kTileCols; j0 <= keys.last; j0 += bc) {
    bc = imin(kAmxKeys, it.j_end - j0);
    if (bc > kTileCols && tile_needs_mask(see, j0, bc)) bc = kTileCols;
    const i64 bc16 = round_up(bc, 16), kp = round_up(bc, 32);
    // Sᵀ = K Qᵀ. K rows in place when they fill whole tiles, else copied with zero padding;
    // fp16's split into (hi, hi, lo) chunks, once for the call (api.cpp) or here.
    const i64 head = b * p.Hkv + g;
    Bf16Rows K{s.K_rows, terms * dk32};
    bool k_finite = true;
    if (t.k_packed.data != nullptr) {
      K = {static_cast<const bf16*>(t.k_packed.data) + head * t.k_packed.per_head + j0 * t.k_packed.ld, t.k_packed.ld};
      k_finite = packed_tiles_finite(t.k_packed, head, j0, bc);
    } else if (split) {
      for (i64 j = j0; j < j0 + bc; j += kTileCols)
        k_finite &= split_k_tile(p, t, b, g, j, s.K_rows + (j - j0) * K.ld, K.ld, s.rows16);
    } else {
      K = bf16_tile_rows(bf16_rows(t.k, b, g, j0, bc, Dk, s.rows16), bc, Dk, bc16, dk32, s.K_rows);
    }
    if (k_finite && q_finite) {
      engine_gemm<E>(bc16, np, terms * dk32, K.data, K.ld, s.QT, np, s.ST, np, /*accumulate=*/false);
    } else {  // fp16 with an inf or NaN in K or Q: Sᵀ widened, as forward_tiled computes it
      for (i64 r = 0; r < np && !qt_widened; ++r)
        if (r < n)
          load_row(t.q, off(t.q, b, lanes.h[r], lanes.i[r], 0), Dk, s.QTf + r, np);
        else
          for (i64 d = 0; d < Dk; ++d) s.QTf[d * np + r] = 0.0f;
      qt_widened = true;
      const AOperand Kf = a_rows(rows_operand(t.k, b, g, j0, bc, Dk, s.K_rows_f, /*scan_in_place=*/false));
      gemm<false, false>(bc, np, Dk, Kf.data, Kf.rs, Kf.cs, s.QTf, np, s.ST, np);
    }
    forward_tile_softmax(p, lanes, see, b, j0, bc, s.ST, s.drop, s.rows, dvp, /*rescale_rows=*/false);
    for (i64 rv = 0; rv < np; rv += W) {  // Oᵀ's columns rescaled by their lane's alpha
      bool unchanged = true;              // every lane's max the same as before: the common case after a few tiles
      for (i64 r = rv; r < rv + W; ++r) unchanged &= s.rows.alpha[r] == 1.0f;
      if (unchanged) continue;
      const R alpha = Vec::load(s.rows.alpha + rv);
      for (i64 e = 0; e < dvp; ++e) Vec::store(s.OT + e * np + rv, Vec::mul(Vec::load(s.OT + e * np + rv), alpha));
    }
    // Oᵀ += Vᵀ Pᵀ, Vᵀ packed for the whole call (api.cpp) or here, kTileCols keys at a time.
    const bf16* VT = s.VT;
    i64 ldvt = terms * kAmxKeys;
    bool v_finite = true;
    if (t.v_packed.data != nullptr) {
      VT = static_cast<const bf16*>(t.v_packed.data) + head * t.v_packed.per_head + terms * j0, ldvt = t.v_packed.ld;
      v_finite = packed_tiles_finite(t.v_packed, head, j0, bc);
    } else {
      for (i64 j = j0; j < j0 + bc; j += kTileCols)
        v_finite &= pack_vt_tile(p, t, b, g, j, s.VT + terms * (j - j0), ldvt, s.rows16, s.VT16);
    }
    if (v_finite) {
      if (split)
        amx::pack_rows_in_pairs_f32_split(s.ST, np, bc, kp, np, s.PT, np);
      else
        amx::pack_rows_in_pairs_f32(s.ST, np, bc, kp, np, s.PT, np);
      engine_gemm<E>(dvp, np, terms * kp, VT, ldvt, s.PT, np, s.OT, np, /*accumulate=*/true);
    } else {  // Oᵀ[e] += v_ce · Pᵀ[c], each product kept only where P is not 0
      const RowsOperand V = rows_operand(t.v, b, g, j0, bc, Dv, s.V_rows, /*scan_in_place=*/true);
      for (i64 c = 0; c < bc; ++c)
        for (i64 e = 0; e < Dv; ++e) {
          const R v = Vec::set1(V.data[c * V.ld + e]);
          for (i64 rv = 0; rv < np; rv += W) {
            const R P = Vec::load(s.ST + c * np + rv);
            float* o = s.OT + e * np + rv;
            Vec::store(o, Vec::add(Vec::load(o), Vec::zero_where_zero(P, Vec::mul(v, P))));
          }
        }
    }
  }
  amx::transpose_f32(s.OT, np, dvp, np, s.rows.O, dvp);
  s.rows.finish(p, t, it, lanes, dvp);
  note_engine_item(E, /*backward=*/false);
}
#endif

// The forward of one item, by the loop that suits it; the one place that chooses. E: the
// engine of the table's 16-bit products; the items of the dtypes it takes that are neither
// decoding nor few-lane go to forward_tiled_amx on it (the AVX-512 path's AMX and dot
// tables, table_on<E>).
template <Engine16 E>
void forward_item_on(const Problem& p, const Tensors& t, const ForwardItem& it, WorkerScratch scratch) {
  const ItemLanes lanes = item_lanes(p, it);
#ifdef SDPA_FUSED_DECODE
  if (decode::applies(p, t, lanes.n)) return decode::forward(p, t, it, lanes, scratch);
#endif
  if (lanes.n <= kFewLanes && t.k.stride[3] == 1) return forward_few_lanes(p, t, it, lanes, scratch);
#ifdef SDPA_AMX_BF16
  if (engine_takes(E, p.dtype)) return forward_tiled_amx<E>(p, t, it, lanes, scratch);
#endif
  forward_tiled(p, t, it, lanes, scratch);
}
void forward_item(const Problem& p, const Tensors& t, const ForwardItem& it, WorkerScratch scratch) {
  forward_item_on<Engine16::widened>(p, t, it, scratch);
}

// Floats per worker: the largest of the layouts forward_item may carve.
i64 forward_scratch(const Problem& p) {
  i64 floats = imax(scratch_floats<TiledForwardScratch>(p), scratch_floats<FewLaneForwardScratch>(p));
#ifdef SDPA_FUSED_DECODE
  floats = imax(floats, scratch_floats<decode::Scratch>(p, kFewLanes));
#endif
  return floats;
}
#ifdef SDPA_AMX_BF16
template <Engine16 E>
i64 forward_scratch_on(const Problem& p) {  // the engine's layout only where forward_item_on<E> may take it
  return engine_takes(E, p.dtype) ? imax(forward_scratch(p), scratch_floats<AmxForwardScratch>(p)) : forward_scratch(p);
}
#endif

// ---------------------------------------------------------------------------------------
// Backward. With P recomputed from lse and delta_i = Σ_e dout_ie out_ie:
//   dS = P ∘ (dout Vᵀ − delta) (0 where P = 0),  dX = β (1 − t²) dS  (t: soft-cap tanh)
//   dV = Pᵀ dout,  dK = dXᵀ Q,  dQ = dX K
// With dropout the forward's out = (P∘M) V, M = keep/(1 − p) regenerated by dropout_tile, so
//   dV = (P∘M)ᵀ dout,  dP = M ∘ (dout Vᵀ)  (the gradient reaching P through the mask),
// and the softmax backward dS = P ∘ (dP − rowsum(P∘dP)) keeps delta: rowsum(P∘dP)_i =
// Σ_j P_ij M_ij (dout_i·v_j) = dout_i · Σ_j (P∘M)_ij v_j = dout_i · out_i = delta_i.
// Two schedules, picked by api.cpp (same bits either way, see backward_item):
//   one pass   one item = (b, kv head g): per key tile, the five GEMMs (S, dP, dV, dK, dQ)
//              over the group's query tiles, dQ summed in the item's own buffer;
//   two passes pass A (b, g, key tile) -> dk, dv; pass B (b, h, query tile) -> dq, which
//              recomputes S and dP: seven GEMMs, but items enough for many threads.

// Row constants of one query tile: lse with -inf replaced by +inf (so exp(s - L) = 0 on an
// empty row, and on padding rows), and delta (0 on padding).
inline void load_row_constants(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 h, i64 i0, i64 br,
                               i64 n, float* row_lse, float* row_delta) {
  for (i64 r = 0; r < n; ++r) {
    if (r < br) {
      const float lse = t.lse_in.data[off(t.lse_in, b, h, i0 + r)];
      row_lse[r] = lse == kNegInf ? kPosInf : lse;
      row_delta[r] = delta[(b * p.Hq + h) * p.Nq + i0 + r];
    } else {
      row_lse[r] = kPosInf;
      row_delta[r] = 0.0f;
    }
  }
}

// dX from P (in S), dP and the soft-cap tanh, over rows × cols of a tile, the per-row
// delta along rows (ROW_CONST) or along columns (pass B's transposed tile).
template <bool ROW_CONST>
inline void ds_from_p(const Problem& p, const float* S, float* dP, const float* T, const float* row_delta, i64 ld,
                      i64 rows, i64 cols) {
  const R beta = Vec::set1(static_cast<float>(p.scale));
  const R one = Vec::set1(1.0f);
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; c += W) {
      const R P = Vec::load(S + r * ld + c);
      const R delta_v = ROW_CONST ? Vec::set1(row_delta[r]) : Vec::load(row_delta + c);
      R ds = Vec::mul(Vec::mul(P, Vec::sub(Vec::load(dP + r * ld + c), delta_v)), beta);
      if (p.has_softcap) {
        const R tt = Vec::load(T + r * ld + c);
        ds = Vec::mul(ds, Vec::sub(one, Vec::mul(tt, tt)));
      }
      Vec::store(dP + r * ld + c, Vec::zero_where_zero(P, ds));
    }
}

// The backward's packed B operands (Kᵀ, Vᵀ; Q, dout and K rows) get a row stride of an odd
// number of 64-byte lines: the GEMM reads B one vector per row down K rows, and at a stride
// of a power of two of lines those vectors fall in a few of L1's 64 sets (at D = 128, the
// 128 rows of Kᵀ at 256 bytes fill 16 sets' 8 ways; 64 rows at 512 bytes fill 8 sets).
inline i64 odd_lines_ld(i64 cols) {
  const i64 ld = round_up(cols, kPad);
  return ld / kPad % 2 == 0 ? ld + kPad : ld;
}
// Rows [r0, r0 + n) of (b, h) packed as a B operand at that stride, finiteness scanned.
inline RowsOperand rows_packed(const InView& x, i64 b, i64 h, i64 r0, i64 n, i64 D, float* buf) {
  const i64 ld = odd_lines_ld(D);
  return {buf, ld, round_up(D, kPad), pack_rows(x, b, h, r0, n, D, buf, ld) ? Finite::yes : Finite::no};
}

// Pass A: key tiles of kv head g (dk, dv); loops over the group's query heads and query
// tiles. Tiles in the row layout (query rows × keys): Kᵀ and Vᵀ are packed once per key
// tile, Q and dout rows once per query tile, as the A operand of S = Q Kᵀ and dP = dout Vᵀ
// and the B operand of dV += Pᵀ dout and dK += dXᵀ Q. Every packed B operand has a row
// stride of an odd number of lines (odd_lines_ld).
// A sweep over the query tiles serves up to kKvTilesPerSweep key tiles (the one pass; pass
// A's items are one key tile each): each query tile's Q and dout rows are fetched, packed
// and scanned once for them all, and its dQ rows brought in once. At N = 4096, D = 128 a
// head's Q, dout and dQ are 6 MiB, streamed from L3 once per sweep (docs/performance.md,
// "The one-pass backward at long rows").
constexpr i64 kKvTilesPerSweep = 2;
// The AMX products' operands (bf16 on the AMX table, `amx` below): A operands as bf16 rows
// padded to whole tiles (d32: D rounded up to 32), B operands in pairs (amx.hpp).
// Sizes along a contraction are `terms` (AmxPack) times those given: fp16's split.
struct AmxOperands {
  bf16* Q16;             // (kTileRows, dk32)       Q rows: S = Q Kᵀ
  bf16* dout16;          // (kTileRows, dv32)       dout rows: dP = dout Vᵀ
  std::uint32_t* Qp;     // (kTileRows/2, dkp)      Q in pairs: dK += dXᵀ Q
  std::uint32_t* doutp;  // (kTileRows/2, dvp)      dout in pairs: dV += P̃ᵀ dout
  bf16* A16;             // (kTileCols, kTileCols)  P̃ᵀ, dXᵀ or dX in bf16, one product at a time
  bf16* rows16;          // (kTileCols, max(Dk, Dv))  rows gathered, when not unit stride
  float* dQ_spare;       // (16, dkp)               amx_dq_rows' last block
  static AmxOperands carve(const Problem& p, Arena& arena, bool engine) {
    const i64 dk32 = round_up(p.Dk, 32), dv32 = round_up(p.Dv, 32);
    const i64 dkp = round_up(p.Dk, kPad), dvp = round_up(p.Dv, kPad);
    const auto halves = [&](i64 n) { return reinterpret_cast<bf16*>(arena.take(engine ? (n + 1) / 2 : 0)); };
    const auto pairs = [&](i64 n) { return reinterpret_cast<std::uint32_t*>(arena.take(engine ? n : 0)); };
    const i64 terms = AmxPack(p).terms;
    AmxOperands s;
    s.Q16 = halves(kTileRows * terms * dk32), s.dout16 = halves(kTileRows * terms * dv32);
    s.Qp = pairs(terms * kTileRows / 2 * dkp), s.doutp = pairs(terms * kTileRows / 2 * dvp);
    s.A16 = halves(kTileCols * terms * kTileCols), s.rows16 = halves(kTileCols * imax(p.Dk, p.Dv));
    s.dQ_spare = arena.take(engine ? 16 * dkp : 0);
    return s;
  }
};
struct KvTileScratch {
  struct KeyTile {
    float* KT;           // (Dk, odd_lines_ld(bcp))
    float* VT;           // (Dv, odd_lines_ld(bcp))
    float* K_rows;       // (bc, odd_lines_ld(Dk))  K rows (one pass's dQ += dX K)
    float* dK;           // (bc, dkp)
    float* dV;           // (bc, dvp)
    std::uint32_t* KTp;  // (terms·dk32/2, kTileCols)  AMX: Kᵀ in pairs
    std::uint32_t* VTp;  // (terms·dv32/2, kTileCols)  AMX: Vᵀ in pairs
    std::uint32_t* Kp;   // (terms·kTileCols/2, dkp)   AMX: K in pairs (one pass's dQ += dX K)
  };
  KeyTile key[kKvTilesPerSweep];  // the sweep's key tiles: `tiles` of them carved
  float* Q_rows;                  // (br, odd_lines_ld(Dk))
  float* dout_rows;               // (br, odd_lines_ld(Dv))
  float* S;                       // (br, bcp)  P
  float* T;                       // (br, bcp)  soft-cap tanh
  float* dP;                      // (br, bcp)  dP, then dX
  float* row_lse;                 // (br)
  float* row_delta;               // (br)
  float* drop;                    // (br, bcp)  dropout multipliers, with dropout
  AmxOperands ops16;              // carved empty unless `engine`
  // engine: the products run on the table's engine (AMX tiles or vdpbf16ps): no fp32 Kᵀ and Vᵀ then.
  static KvTileScratch carve(const Problem& p, Arena& arena, i64 tiles, bool engine) {
    const i64 dkp = round_up(p.Dk, kPad), dvp = round_up(p.Dv, kPad);
    const i64 dk32 = round_up(p.Dk, 32), dv32 = round_up(p.Dv, 32), terms = AmxPack(p).terms;
    KvTileScratch s{};
    for (i64 u = 0; u < tiles; ++u) {
      KeyTile& k = s.key[u];
      k.KT = arena.take(engine ? 0 : p.Dk * odd_lines_ld(kTileCols));
      k.VT = arena.take(engine ? 0 : p.Dv * odd_lines_ld(kTileCols));
      k.K_rows = arena.take(kTileCols * odd_lines_ld(p.Dk));
      k.dK = arena.take(kTileCols * dkp);
      k.dV = arena.take(kTileCols * dvp);
      k.KTp = reinterpret_cast<std::uint32_t*>(arena.take(engine ? terms * dk32 / 2 * kTileCols : 0));
      k.VTp = reinterpret_cast<std::uint32_t*>(arena.take(engine ? terms * dv32 / 2 * kTileCols : 0));
      k.Kp = reinterpret_cast<std::uint32_t*>(arena.take(engine ? terms * kTileCols / 2 * dkp : 0));
    }
    s.Q_rows = arena.take(kTileRows * odd_lines_ld(p.Dk));
    s.dout_rows = arena.take(kTileRows * odd_lines_ld(p.Dv));
    s.S = arena.take(kTileRows * kTileCols);
    s.T = arena.take(kTileRows * kTileCols);
    s.dP = arena.take(kTileRows * kTileCols);
    s.row_lse = arena.take(kTileRows);
    s.row_delta = arena.take(kTileRows);
    s.drop = arena.take(p.has_dropout ? kTileRows * kTileCols : 0);
    s.ops16 = AmxOperands::carve(p, arena, engine);
    return s;
  }
};

// dQ rows (br of them, row stride dkp) += dX · K on tiles: dX as bf16 rows (A, row stride
// ldx, br rounded up to 16 of them, zero past br), K in pairs (B, kp/2 pair rows). A tile
// writes 16 whole rows, so a last block short of 16 rows goes through `spare` (16 rows of
// dkp): the rows after br are another head's and stay untouched.
template <Engine16 E>
inline void amx_dq_rows(i64 br, i64 dkp, i64 kp, const bf16* dX, i64 ldx, const std::uint32_t* Kp, float* dQ_rows,
                        float* spare) {
  const i64 whole = br / 16 * 16;
  if (whole > 0) engine_gemm<E>(whole, dkp, kp, dX, ldx, Kp, dkp, dQ_rows, dkp, /*accumulate=*/true);
  if (whole == br) return;
  for (i64 x = 0; x < 16 * dkp; ++x) spare[x] = x < (br - whole) * dkp ? dQ_rows[whole * dkp + x] : 0.0f;
  engine_gemm<E>(16, dkp, kp, dX + whole * ldx, ldx, Kp, dkp, spare, dkp, /*accumulate=*/true);
  for (i64 x = 0; x < (br - whole) * dkp; ++x) dQ_rows[whole * dkp + x] = spare[x];
}

// Key tiles [j0, j0 + tiles·kTileCols) ∩ [0, Nk) of pass A (tiles <= kKvTilesPerSweep), and
// with dQ set (the one pass) also dQ += dX K for every query tile they meet: dQ holds the
// group's query rows, (group·Nq, dkp), row (h - g·group)·Nq + i. dX K is summed in the
// order pass B sums it (key by key within a tile, tiles in ascending order, from zero: a
// query tile meets the sweep's key tiles in ascending order, and sweeps go in ascending
// order), with the scores and dX computed by the same operations in the transposed layout,
// so both schedules give the same bits; each key tile's dK and dV see the query tiles in
// the same order whatever the sweep.
// PLAIN: fp32 tensors and no dropout (the common call), known at compile time so the tile
// loop carries no dtype or dropout test. E (not widened): the five products on the engine
// (AMX tiles, or vdpbf16ps; one GEMM, engine_gemm), their operands rounded where the naive
// bf16 implementation rounds them (P̃ for dV, dX for dK and dQ: reference::backward_naive);
// S and dP are fp32 sums of exact products. Neither engine can skip a zero weight, so a product whose B operand holds an inf or NaN (Q for
// dK, dout for dV, K for dQ) takes the fp32 one that does, as the widening path always
// does: a row or key that sees nothing must not meet 0·inf. Pass B decides dQ's product by
// the same K tile, so both schedules keep the same bits. Chosen once per call by kv_tiles_for.
template <bool PLAIN, Engine16 E>
void kv_tiles(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 g, i64 j0, i64 tiles,
              const KvTileScratch& s, float* dQ) {
  const bool dropout = !PLAIN && p.has_dropout;
  const i64 Dk = p.Dk, Dv = p.Dv, dkp = round_up(Dk, kPad), dvp = round_up(Dv, kPad);
  const i64 dk32 = round_up(Dk, 32), dv32 = round_up(Dv, 32);
  const AmxOperands& a16 = s.ops16;
  const AmxPack pk(p);
  const i64 terms = pk.terms;
  constexpr i64 BR = kTileRows;
  tiles = imin(tiles, (p.Nk - j0 + kTileCols - 1) / kTileCols);

  RowsOperand k_op[kKvTilesPerSweep];
  bool k_pairs_finite[kKvTilesPerSweep] = {};  // AMX: K in pairs (dQ's B operand) all finite
  for (i64 u = 0; u < tiles; ++u) {
    const KvTileScratch::KeyTile& key = s.key[u];
    const i64 ju = j0 + u * kTileCols, bc = imin(kTileCols, p.Nk - ju), ldt = odd_lines_ld(bc);
    if constexpr (E != Engine16::widened) {
      const i64 bcp = round_up(bc, kPad);
      const Bf16Rows k_rows = bf16_rows(t.k, b, g, ju, bc, Dk, a16.rows16);
      pk.pairs_transposed(k_rows, bc, Dk, bcp, key.KTp, kTileCols);
      if (dQ != nullptr) {
        k_pairs_finite[u] = pk.rows_in_pairs(k_rows, bc, Dk, round_up(bc, 32), key.Kp, dkp);
        if (!k_pairs_finite[u]) k_op[u] = rows_packed(t.k, b, g, ju, bc, Dk, key.K_rows);
      }
      const Bf16Rows v_rows = bf16_rows(t.v, b, g, ju, bc, Dv, a16.rows16);
      pk.pairs_transposed(v_rows, bc, Dv, bcp, key.VTp, kTileCols);
    } else {
      pack_transposed(t.k, b, g, ju, bc, Dk, key.KT, ldt);
      pack_transposed(t.v, b, g, ju, bc, Dv, key.VT, ldt);
      if (dQ != nullptr) k_op[u] = rows_packed(t.k, b, g, ju, bc, Dk, key.K_rows);
    }
    for (i64 x = 0; x < bc * dkp; ++x) key.dK[x] = 0.0f;
    for (i64 x = 0; x < bc * dvp; ++x) key.dV[x] = 0.0f;
  }

  for (i64 h = g * p.group; h < (g + 1) * p.group; ++h)
    for (i64 i0 = 0; i0 < p.Nq; i0 += BR) {
      const i64 br = imin(BR, p.Nq - i0), br16 = round_up(br, 16), br32 = round_up(br, 32);
      const LanesSee see = rows_see(p, b, h, i0, br);
      const KeyRange seen = visible_keys(see, j0, imin(p.Nk, j0 + tiles * kTileCols));
      if (seen.last < seen.first) continue;  // every tile fully masked
      load_row_constants(p, t, delta, b, h, i0, br, br, s.row_lse, s.row_delta);
      // fp32 Q and dout rows: the products' operands, or on AMX a fallback's (only where
      // their pairs hold an inf or NaN).
      RowsOperand q_op{}, dout_op{};
      bool q_pairs_finite = false, dout_pairs_finite = false;
      Bf16Rows Q16{}, dout16{};  // AMX: the A operands of S and dP, in place where they fill whole tiles
      if constexpr (E != Engine16::widened) {
        // Rows gathered into rows16 are copied out before the next gather reuses it.
        const auto tile_rows = [&](const Bf16Rows& x, i64 D, i64 d32, bf16* buf) {
          return pk.tile_rows(x, br, D, br16, d32, buf, /*in_place=*/x.data != a16.rows16);
        };
        const Bf16Rows q_rows = bf16_rows(t.q, b, h, i0, br, Dk, a16.rows16);
        Q16 = tile_rows(q_rows, Dk, dk32, a16.Q16);
        q_pairs_finite = pk.rows_in_pairs(q_rows, br, Dk, br32, a16.Qp, dkp);
        const Bf16Rows dout_rows = bf16_rows(t.dout, b, h, i0, br, Dv, a16.rows16);
        dout16 = tile_rows(dout_rows, Dv, dv32, a16.dout16);
        dout_pairs_finite = pk.rows_in_pairs(dout_rows, br, Dv, br32, a16.doutp, dvp);
      }
      if (!q_pairs_finite) q_op = rows_packed(t.q, b, h, i0, br, Dk, s.Q_rows);
      if (!dout_pairs_finite) dout_op = rows_packed(t.dout, b, h, i0, br, Dv, s.dout_rows);
      const AOperand q_a = a_rows(q_op), dout_a = a_rows(dout_op);
      for (i64 u = 0; u < tiles; ++u) {
        const KvTileScratch::KeyTile& key = s.key[u];
        const i64 ju = j0 + u * kTileCols, bc = imin(kTileCols, p.Nk - ju), bcp = round_up(bc, kPad);
        const i64 ldt = odd_lines_ld(bc);
        const KeyRange keys = visible_keys(see, ju, ju + bc);
        if (keys.last < keys.first) continue;  // tile fully masked
        if constexpr (E != Engine16::widened)
          engine_gemm<E>(br16, bcp, terms * dk32, Q16.data, Q16.ld, key.KTp, kTileCols, s.S, bcp, /*accumulate=*/false);
        else
          gemm<false, false>(br, bcp, Dk, q_a.data, q_a.rs, q_a.cs, key.KT, ldt, s.S, bcp);
        scale_softcap(p, s.S, bcp, br, bcp, s.T);
        if (tile_needs_mask(see, ju, bcp))  // padding columns past bc included
          mask_tile(p, s.S, bcp, 1, br, b, ju, bcp, [&](i64 r) { return LaneRow{h, i0 + r}; });
        for (i64 r = 0; r < br; ++r) {  // P = exp(s - lse_r)
          const R Lr = Vec::set1(s.row_lse[r]);
          for (i64 c = 0; c < bcp; c += W)
            Vec::store(s.S + r * bcp + c, Vec::exp(Vec::sub(Vec::load(s.S + r * bcp + c), Lr)));
        }
        if constexpr (E != Engine16::widened)
          engine_gemm<E>(br16, bcp, terms * dv32, dout16.data, dout16.ld, key.VTp, kTileCols, s.dP, bcp,
                         /*accumulate=*/false);
        else
          gemm<false, false>(br, bcp, Dv, dout_a.data, dout_a.rs, dout_a.cs, key.VT, ldt, s.dP, bcp);
        if (dropout) {  // dP through the mask; P becomes P∘M for dV once dX is made
          dropout_tile(p, s.drop, bcp, 1, br, b, ju, bcp, [&](i64 r) { return LaneRow{h, i0 + r}; });
          mul_tile(s.dP, bcp, s.drop, bcp, br, bcp);
        }
        ds_from_p<true>(p, s.S, s.dP, s.T, s.row_delta, bcp, br, bcp);
        if (dropout) mul_tile(s.S, bcp, s.drop, bcp, br, bcp);
        float* dQ_rows = dQ == nullptr ? nullptr : dQ + ((h - g * p.group) * p.Nq + i0) * dkp;
        if constexpr (E != Engine16::widened) {  // each product on tiles where its B operand is all finite
          if (dout_pairs_finite) {  // dV += P̃ᵀ dout
            pk.transposed(s.S, bcp, br, br32, a16.A16, terms * kTileRows);
            engine_gemm<E>(bcp, dvp, terms * br32, a16.A16, terms * kTileRows, a16.doutp, dvp, key.dV, dvp,
                           /*accumulate=*/true);
          }
          if (q_pairs_finite) {  // dK += dXᵀ Q
            pk.transposed(s.dP, bcp, br, br32, a16.A16, terms * kTileRows);
            engine_gemm<E>(bcp, dkp, terms * br32, a16.A16, terms * kTileRows, a16.Qp, dkp, key.dK, dkp,
                           /*accumulate=*/true);
          }
          if (dQ_rows != nullptr && k_pairs_finite[u]) {  // dQ += dX K
            pk.round_rows(s.dP, bcp, br, bc, br16, round_up(bc, 32), a16.A16, terms * kTileCols);
            amx_dq_rows<E>(br, dkp, terms * round_up(bc, 32), a16.A16, terms * kTileCols, key.Kp, dQ_rows,
                           a16.dQ_spare);
          }
        }
        // dV += Pᵀ dout and dK += dXᵀ Q: A[c][r] = tile[r·bcp + c].
        if (!dout_pairs_finite)
          gemm_acc_skip_zero(dout_op.finite, bc, dout_op.cols, br, s.S, 1, bcp, dout_op.data, dout_op.ld, key.dV, dvp,
                             nullptr);
        if (!q_pairs_finite)
          gemm_acc_skip_zero(q_op.finite, bc, q_op.cols, br, s.dP, 1, bcp, q_op.data, q_op.ld, key.dK, dkp, nullptr);
        if (dQ_rows != nullptr && !k_pairs_finite[u])  // dQ += dX K: A[r][c] = tile[r·bcp + c]
          gemm_acc_skip_zero(k_op[u].finite, br, k_op[u].cols, bc, s.dP, bcp, 1, k_op[u].data, k_op[u].ld, dQ_rows, dkp,
                             nullptr);
      }
    }

  for (i64 u = 0; u < tiles; ++u) {  // rounded once, here, for 16-bit dk and dv
    const i64 ju = j0 + u * kTileCols;
    for (i64 c = 0; c < imin(kTileCols, p.Nk - ju); ++c) {
      store_row(t.dk, off(t.dk, b, g, ju + c, 0), Dk, s.key[u].dK + c * dkp);
      store_row(t.dv, off(t.dv, b, g, ju + c, 0), Dv, s.key[u].dV + c * dvp);
    }
  }
}

// The one choice of kv_tiles' instantiation, from the table (AMX), the call's dtype and
// dropout; and whether the backward's items of a call on that table run on AMX tiles.
using KvTilesFn = void (*)(const Problem&, const Tensors&, const float*, i64, i64, i64, i64, const KvTileScratch&,
                           float*);
template <Engine16 E>
inline bool backward_on_engine(const Problem& p) {
  return engine_takes(E, p.dtype) && (!engine_backward_needs_finite(E, p.dtype) || p.inputs_finite);
}
template <Engine16 E>
inline KvTilesFn kv_tiles_for(const Problem& p) {
  if constexpr (E != Engine16::widened)
    if (backward_on_engine<E>(p)) return kv_tiles<false, E>;
  return p.dtype == Dtype::f32 && !p.has_dropout ? kv_tiles<true, Engine16::widened>
                                                 : kv_tiles<false, Engine16::widened>;
}

template <Engine16 E>
void backward_kv_tile(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 g, i64 j0,
                      WorkerScratch scratch) {
  const bool engine = backward_on_engine<E>(p);
  const AmxTiles tiles(E == Engine16::amx && engine);
  kv_tiles_for<E>(p)(p, t, delta, b, g, j0, 1, carve_scratch<KvTileScratch>(p, scratch, i64{1}, engine), nullptr);
  if (engine) note_engine_item(E, /*backward=*/true);
}

// The one pass: item (b, g) owns dk, dv of its keys and dq of its group's query rows, so
// every sum has one fixed order and no other item writes there (FlashAttention-2's
// backward loop order, Dao 2023, arXiv:2307.08691, Algorithm 2; its atomic dQ adds become
// the item's own buffer). dQ is O(group·Nq·Dk) per worker: api.cpp takes the two passes
// where that would be large.
struct ItemBackwardScratch {
  KvTileScratch tiles;
  float* dQ;  // (group·Nq, dkp)
  static ItemBackwardScratch carve(const Problem& p, Arena& arena, bool engine) {
    ItemBackwardScratch s;
    s.tiles = KvTileScratch::carve(p, arena, kKvTilesPerSweep, engine);
    s.dQ = arena.take(p.group * p.Nq * round_up(p.Dk, kPad));
    return s;
  }
};

template <Engine16 E>
void backward_item(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 g, WorkerScratch scratch) {
  const i64 dkp = round_up(p.Dk, kPad), rows = p.group * p.Nq;
  const bool engine = backward_on_engine<E>(p);
  const auto s = carve_scratch<ItemBackwardScratch>(p, scratch, engine);
  for (i64 x = 0; x < rows * dkp; ++x) s.dQ[x] = 0.0f;
  const KvTilesFn sweep = kv_tiles_for<E>(p);
  {
    const AmxTiles tiles(E == Engine16::amx && engine);
    for (i64 j0 = 0; j0 < p.Nk; j0 += kKvTilesPerSweep * kTileCols)
      sweep(p, t, delta, b, g, j0, kKvTilesPerSweep, s.tiles, s.dQ);
  }
  for (i64 l = 0; l < rows; ++l) {
    const i64 h = g * p.group + l / p.Nq, i = l % p.Nq;
    store_row(t.dq, off(t.dq, b, h, i, 0), p.Dk, s.dQ + l * dkp);
  }
  if (engine) note_engine_item(E, /*backward=*/true);
}

// Pass B: dq of one query tile; loops over the key tiles it can see. Tiles in the
// transposed layout (keys × query lanes): Qᵀ and doutᵀ are packed once, K and V rows are
// read in place, as the A operand of Sᵀ = K Qᵀ and dPᵀ = V doutᵀ and the B operand of
// dQ += dX K. On AMX (bf16 on the AMX table) the same three products on tiles: Qᵀ and
// doutᵀ in pairs, K and V rows as bf16 tiles, dX rounded to bf16 and K in pairs for dQ,
// which a K tile holding an inf or NaN takes in fp32 instead, as kv_tiles does.
struct QTileScratch {
  float* QT;              // (Dk, brp)
  float* doutT;           // (Dv, brp)
  float* K_rows;          // (bc, dkp)  K rows, when not rows_in_place
  float* V_rows;          // (bc, dvp)  V rows widened, for 16-bit V
  float* ST;              // (bc, brp)  P transposed
  float* TT;              // (bc, brp)  soft-cap tanh, transposed
  float* dPT;             // (bc, brp)  dP, then dX, transposed
  float* dQ;              // (br, dkp)
  float* row_lse;         // (brp)
  float* row_delta;       // (brp)
  float* drop;            // (bc, brp)  dropout multipliers, with dropout
  // AMX (contractions `terms` (AmxPack) times as long for fp16's split):
  std::uint32_t* QTp;     // (dk32/2, kTileRows)  Qᵀ in pairs
  std::uint32_t* doutTp;  // (dv32/2, kTileRows)  doutᵀ in pairs
  std::uint32_t* Kp;      // (kTileCols/2, dkp)   K in pairs
  bf16* K16;              // (kTileCols, dk32)    K rows padded to whole tiles
  bf16* V16;              // (kTileCols, dv32)    V rows likewise
  bf16* dX16;             // (kTileRows, kTileCols)  dX rows in bf16
  bf16* rows16;           // (kTileCols, max(Dk, Dv))  AMX: rows gathered, when not unit stride
  static QTileScratch carve(const Problem& p, Arena& arena, bool engine) {
    const i64 dkp = round_up(p.Dk, kPad), dk32 = round_up(p.Dk, 32), dv32 = round_up(p.Dv, 32);
    const auto halves = [&](i64 n) { return reinterpret_cast<bf16*>(arena.take(engine ? (n + 1) / 2 : 0)); };
    const auto pairs = [&](i64 n) { return reinterpret_cast<std::uint32_t*>(arena.take(engine ? n : 0)); };
    QTileScratch s;
    s.QT = arena.take(engine ? 0 : p.Dk * kTileRows);
    s.doutT = arena.take(engine ? 0 : p.Dv * kTileRows);
    s.K_rows = arena.take(kTileCols * dkp);
    s.V_rows = arena.take(p.dtype == Dtype::f32 || engine ? 0 : kTileCols * round_up(p.Dv, kPad));
    s.ST = arena.take(kTileCols * kTileRows);
    s.TT = arena.take(kTileCols * kTileRows);
    s.dPT = arena.take(kTileCols * kTileRows);
    s.dQ = arena.take(kTileRows * dkp);
    s.row_lse = arena.take(kTileRows);
    s.row_delta = arena.take(kTileRows);
    s.drop = arena.take(p.has_dropout ? kTileCols * kTileRows : 0);
    const i64 terms = AmxPack(p).terms;
    s.QTp = pairs(terms * dk32 / 2 * kTileRows), s.doutTp = pairs(terms * dv32 / 2 * kTileRows);
    s.Kp = pairs(terms * kTileCols / 2 * dkp);
    s.K16 = halves(kTileCols * terms * dk32), s.V16 = halves(kTileCols * terms * dv32);
    s.dX16 = halves(kTileRows * terms * kTileCols), s.rows16 = halves(kTileCols * imax(p.Dk, p.Dv));
    return s;
  }
};

template <Engine16 E>
void backward_q_tile(const Problem& p, const Tensors& t, const float* delta, i64 b, i64 h, i64 i0,
                     WorkerScratch scratch) {
  const i64 g = h / p.group, Dk = p.Dk, Dv = p.Dv, dkp = round_up(Dk, kPad);
  const i64 dk32 = round_up(Dk, 32), dv32 = round_up(Dv, 32);
  const i64 br = imin(kTileRows, p.Nq - i0), brp = round_up(br, kPad);
  constexpr i64 BC = kTileCols;
  const bool engine = backward_on_engine<E>(p);
  const auto s = carve_scratch<QTileScratch>(p, scratch, engine);
  const AmxTiles tiles(E == Engine16::amx && engine);
  const AmxPack pk(p);
  const i64 terms = pk.terms;

  if (engine) {
    const Bf16Rows q_rows = bf16_rows(t.q, b, h, i0, br, Dk, s.rows16);
    pk.pairs_transposed(q_rows, br, Dk, brp, s.QTp, brp, SplitOrder::hi_hi_lo);
    const Bf16Rows dout_rows = bf16_rows(t.dout, b, h, i0, br, Dv, s.rows16);
    pk.pairs_transposed(dout_rows, br, Dv, brp, s.doutTp, brp, SplitOrder::hi_hi_lo);
  } else {
    pack_transposed(t.q, b, h, i0, br, Dk, s.QT, brp);
    pack_transposed(t.dout, b, h, i0, br, Dv, s.doutT, brp);
  }
  load_row_constants(p, t, delta, b, h, i0, br, brp, s.row_lse, s.row_delta);
  for (i64 x = 0; x < br * dkp; ++x) s.dQ[x] = 0.0f;

  const LanesSee see = rows_see(p, b, h, i0, br);
  const KeyRange keys = visible_keys(see, 0, p.Nk);
  for (i64 j0 = keys.first / BC * BC; j0 <= keys.last; j0 += BC) {
    const i64 bc = imin(BC, p.Nk - j0), bc16 = round_up(bc, 16);
    bool k_pairs_finite = false;  // AMX: dQ += dX K on tiles
    if (engine) {
      const Bf16Rows k_rows = bf16_rows(t.k, b, g, j0, bc, Dk, s.rows16);
      k_pairs_finite = pk.rows_in_pairs(k_rows, bc, Dk, round_up(bc, 32), s.Kp, dkp);
      const Bf16Rows K = pk.tile_rows(k_rows, bc, Dk, bc16, dk32, s.K16, true, SplitOrder::hi_lo_hi);
      engine_gemm<E>(bc16, brp, terms * dk32, K.data, K.ld, s.QTp, brp, s.ST, brp, /*accumulate=*/false);
    }
    const RowsOperand k_op =
        k_pairs_finite ? RowsOperand{} : rows_operand(t.k, b, g, j0, bc, Dk, s.K_rows, /*scan_in_place=*/true);
    if (!engine) {
      const AOperand k_a = a_operand(t.k, b, g, j0, k_op);
      gemm<false, false>(bc, brp, Dk, k_a.data, k_a.rs, k_a.cs, s.QT, brp, s.ST, brp);
    }
    scale_softcap(p, s.ST, brp, bc, brp, s.TT);
    if (tile_needs_mask(see, j0, bc))
      mask_tile(p, s.ST, 1, brp, br, b, j0, bc, [&](i64 r) { return LaneRow{h, i0 + r}; });
    for (i64 c = 0; c < bc; ++c)  // P = exp(s - lse), lse along the lanes (+inf on padding lanes)
      for (i64 r = 0; r < brp; r += W)
        Vec::store(s.ST + c * brp + r, Vec::exp(Vec::sub(Vec::load(s.ST + c * brp + r), Vec::load(s.row_lse + r))));
    if (engine) {
      const Bf16Rows V =
          pk.tile_rows(bf16_rows(t.v, b, g, j0, bc, Dv, s.rows16), bc, Dv, bc16, dv32, s.V16, true, SplitOrder::hi_lo_hi);
      engine_gemm<E>(bc16, brp, terms * dv32, V.data, V.ld, s.doutTp, brp, s.dPT, brp, /*accumulate=*/false);
    } else {
      const AOperand v_a = t.v.dtype == Dtype::f32
                               ? a_in_place(t.v, b, g, j0)
                               : a_rows(rows_operand(t.v, b, g, j0, bc, Dv, s.V_rows, /*scan_in_place=*/false));
      gemm<false, false>(bc, brp, Dv, v_a.data, v_a.rs, v_a.cs, s.doutT, brp, s.dPT, brp);
    }
    if (p.has_dropout) {  // dP through the mask, as pass A (same multipliers, same product)
      dropout_tile(p, s.drop, 1, brp, br, b, j0, bc, [&](i64 r) { return LaneRow{h, i0 + r}; });
      mul_tile(s.dPT, brp, s.drop, brp, bc, round_up(br, W));
    }
    ds_from_p<false>(p, s.ST, s.dPT, s.TT, s.row_delta, brp, bc, brp);
    // dQ += dX K: A[r][c] = dXᵀ[c·brp + r].
    if (k_pairs_finite) {
      const i64 bc32 = round_up(bc, 32);
      pk.transposed(s.dPT, brp, bc, bc32, s.dX16, terms * kTileCols);
      engine_gemm<E>(brp, dkp, terms * bc32, s.dX16, terms * kTileCols, s.Kp, dkp, s.dQ, dkp, /*accumulate=*/true);
    } else {
      gemm_acc_skip_zero(k_op.finite, br, k_op.cols, bc, s.dPT, 1, brp, k_op.data, k_op.ld, s.dQ, dkp, nullptr);
    }
  }

  for (i64 r = 0; r < br; ++r) store_row(t.dq, off(t.dq, b, h, i0 + r, 0), Dk, s.dQ + r * dkp);
  if (engine) note_engine_item(E, /*backward=*/true);
}

// Floats per worker: the larger of the two passes' layouts (one block serves both) ...
template <Engine16 E>
i64 backward_scratch(const Problem& p) {
  const bool engine = backward_on_engine<E>(p);
  return imax(scratch_floats<KvTileScratch>(p, i64{1}, engine), scratch_floats<QTileScratch>(p, engine));
}
// ... and the one pass's.
template <Engine16 E>
i64 backward_item_scratch(const Problem& p) {
  return scratch_floats<ItemBackwardScratch>(p, backward_on_engine<E>(p));
}

void exp_n(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) Vec::store(y + i, Vec::exp(Vec::load(x + i)));
}
void tanh_n(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) Vec::store(y + i, Vec::tanh(Vec::load(x + i)));
}

PackLayout no_pack(const Problem&, PackedOperand) { return {}; }

const FastKernels& table() {
  static const FastKernels k{Engine16::widened,
                             forward_scratch,
                             backward_scratch<Engine16::widened>,
                             backward_item_scratch<Engine16::widened>,
                             forward_item,
                             backward_item<Engine16::widened>,
                             backward_kv_tile<Engine16::widened>,
                             backward_q_tile<Engine16::widened>,
                             exp_n,
                             tanh_n,
                             no_pack,
                             nullptr};
  return k;
}
#ifdef SDPA_AMX_BF16
// The same kernel with the 16-bit tiled forward and the backward's products on the engine E
// (forward_item_on<E>, the backward's <E> instantiations): AMX tiles, or vdpbf16ps.
template <Engine16 E>
const FastKernels& table_on() {
  static const FastKernels k = [] {
    FastKernels on = table();
    on.engine = E;
    on.forward_scratch = forward_scratch_on<E>;
    on.forward_item = forward_item_on<E>;
    on.backward_scratch = backward_scratch<E>;
    on.backward_item_scratch = backward_item_scratch<E>;
    on.backward_item = backward_item<E>;
    on.backward_kv_tile = backward_kv_tile<E>;
    on.backward_q_tile = backward_q_tile<E>;
    on.forward_pack_layout = forward_pack_layout_on<E>;
    on.forward_pack_tile = forward_pack_tile_amx;
    return on;
  }();
  return k;
}
#endif
