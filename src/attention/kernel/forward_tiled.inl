// forward_tiled.inl — the forward's general tile loop in fp32 (16-bit inputs widened on load, and
// a KV cache's paged or quantized rows found and widened a tile at a time).

// ---------------------------------------------------------------------------------------
// Forward, in the transposed layout: a tile holds Sᵀ (bc keys × np query lanes), so
//   Sᵀ = K·Qᵀ     reads K rows straight from the tensor,
//   O += P·V      reads V rows straight from the tensor (when rows_in_place),
// and only Q is packed, once per item. The online softmax runs down the key rows with one
// query per vector lane: no horizontal reductions. Two loops, picked by forward_item:
//   forward_tiled      Sᵀ by the register-blocked GEMM, 64 keys per tile;
//   forward_few_lanes  (at most kFewLanes lanes: decoding) Sᵀ by dot products, 32 keys per
//                      tile, K and V prefetched ahead, V's finiteness checked after P·V.
// (and on AVX2 and AVX-512, kernel/decode.inl for the few-lane items it can take.)

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
  float* K_rows;  // (bc, dkp)  K rows widened (16-bit K, a KV cache's rows)
  float* V_rows;  // (bc, dvp)  V rows, when not rows_in_place
  float* drop;    // (bc, np)   dropout multipliers, with dropout
  OnlineRows rows;
  static TiledForwardScratch carve(const Problem& p, Arena& arena) {
    TiledForwardScratch s;
    s.QT = arena.take(p.Dk * kTileRows);
    s.ST = arena.take(kTileCols * kTileRows);
    s.K_rows = arena.take(kTileCols * round_up(p.Dk, kPad));
    s.drop = arena.take(p.has_dropout ? kTileCols * kTileRows : 0);
    s.V_rows = arena.take(kTileCols * round_up(p.Dv, kPad));
    s.rows = OnlineRows::carve(p, arena, kTileRows);
    return s;
  }
};

void forward_tiled(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes,
                   WorkerScratch scratch) {
  const i64 b = it.b, g = it.g, Dk = p.Dk, Dv = p.Dv, dvp = round_up(Dv, kPad), n = lanes.n, np = lanes.np;
  const bool cache = cache_rows(t);
  const bool k_runs = paged_rows_in_place(t, /*key=*/true, Dk), v_runs = paged_rows_in_place(t, /*key=*/false, Dv);
  const auto s = carve_scratch<TiledForwardScratch>(p, scratch);
  for (i64 r = 0; r < n; ++r) load_row(t.q, off(t.q, b, lanes.h[r], lanes.i[r], 0), Dk, s.QT + r, np);
  for (i64 d = 0; d < Dk; ++d)
    for (i64 r = n; r < np; ++r) s.QT[d * np + r] = 0.0f;
  s.rows.start(lanes, dvp);
  const LanesSee see = item_sees(p, b, lanes);
  const KeyRange keys = visible_keys(see, it.j_begin, it.j_end);
  for (i64 j0 = keys.first / kTileCols * kTileCols; j0 <= keys.last; j0 += kTileCols) {
    const i64 bc = imin(kTileCols, p.Nk - j0);
    // Sᵀ = K Qᵀ, K rows read in place (16-bit: widened first; a KV cache's: found and widened; a
    // paged fp32 cache's in place, one GEMM per block's run of keys: each score is the same dot
    // product whichever GEMM computes its row).
    if (k_runs) {
      for (i64 c0 = 0; c0 < bc;) {
        const BlockRun run = block_run(t, /*key=*/true, b, g, j0 + c0);
        const i64 rows = imin(run.keys, bc - c0);
        gemm<false, false>(rows, np, Dk, run.rows, t.k.stride[2], 1, s.QT, np, s.ST + c0 * np, np);
        c0 += rows;
      }
    } else {
      const AOperand K =
          !cache && t.k.dtype == Dtype::f32
              ? a_in_place(t.k, b, g, j0)
              : a_rows(kv_rows_operand(t, /*key=*/true, b, g, j0, bc, Dk, s.K_rows, /*scan_in_place=*/false));
      gemm<false, false>(bc, np, Dk, K.data, K.rs, K.cs, s.QT, np, s.ST, np);
    }
    forward_tile_softmax(p, lanes, see, b, j0, bc, s.ST, s.drop, s.rows, dvp);
    // O += P V, P read down its columns (A[r][c] = ST[c·np + r]); a paged fp32 cache's V rows in
    // place through a table of row pointers, scanned as contiguous rows read in place are.
    if (v_runs) {
      const float* v_rows[kTileCols];
      bool finite = true;
      for (i64 c0 = 0; c0 < bc;) {
        const BlockRun run = block_run(t, /*key=*/false, b, g, j0 + c0);
        const i64 rows = imin(run.keys, bc - c0);
        for (i64 c = 0; c < rows; ++c) v_rows[c0 + c] = run.rows + c * t.v.stride[2];
        finite &= rows_finite(run.rows, t.v.stride[2], rows, Dv);
        c0 += rows;
      }
      gemm_acc_skip_zero_on(finite ? Finite::yes : Finite::no, n, Dv, bc, s.ST, 1, np, TableRows{v_rows}, s.rows.O,
                            dvp, nullptr);
    } else {
      const RowsOperand V = kv_rows_operand(t, /*key=*/false, b, g, j0, bc, Dv, s.V_rows, /*scan_in_place=*/true);
      gemm_acc_skip_zero(V.finite, n, V.cols, bc, s.ST, 1, np, V.data, V.ld, s.rows.O, dvp, nullptr);
    }
  }
  s.rows.finish(p, t, it, lanes, dvp);
}
