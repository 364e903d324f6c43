// forward_few_lanes.inl — the forward for items of a few query lanes where the fused decoding
// loop does not apply (the scalar path, strided K or V, dropout, sparse explicit masks).

// Sᵀ for a tile with few query lanes (decoding): one dot product per (key, lane), the key
// row loaded once in vector chunks and reused for every lane, then one horizontal sum.
// The GEMM form would spend a broadcast and a full-width FMA per (key, element) with most
// lanes idle. Q_rows: the n lanes' queries as rows of ldq floats. Needs unit-stride keys.
// dk_vec: Dk rounded down to whole vectors; the rest of each product is dot_tail's.
// Rows [j, j + rows) of (b, g), D elements each, prefetched into L2, one line (64 bytes) at a time.
inline void prefetch_rows(const InView& x, i64 b, i64 g, i64 j, i64 rows, i64 D) {
  const i64 size = x.element_bytes();
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
  with_count<kScoreLanes - 1>(n - r, [&](auto nl) {  // the lanes left, fewer than a block's
    scores_lane_block<decltype(nl)::value>(K, ldk, bc, dk_vec, Dk, Q_rows + r * ldq, ldq, ST + r, np);
  });
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
