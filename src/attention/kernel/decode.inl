// decode.inl — the forward for items with few query lanes (decoding): scores,
// online softmax and P·V fused per tile of keys, the lanes taken in groups that share
// every K and V load. forward_item (forward.inl) sends it the items `decode::applies`
// to; the scalar build keeps forward_few_lanes. Written once against `Vec` and a small
// per-ISA set of primitives `Ops` (isa_avx512.hpp, isa_avx2.hpp: the element loads,
// the W-into-1 reduction, the per-group max and sum, the lane mask test, pin and pin_query), and included
// inside namespace decode of each SIMD ISA by kernel.inl where the ISA layer defines
// SDPA_FUSED_DECODE.
//
// K and V are read in the call's dtype E (float, bf16 or fp16): every K and V element goes
// through Ops::load / Ops::load_part / Ops::to_float (the one seam: fp32 as is, fp16 by
// F16C's vcvtph2ps, bf16 by zero-extend and shift 16), so a 16-bit KV cache is read once at
// half the bytes of fp32 and widened in registers; Q, P, O and the arithmetic stay fp32.
// A quantized cache's bytes (I8Code, E4M3Code) go through the same seam, and their scales,
// one per key, multiply the scores (K's) and the probabilities (V's) a score vector at a
// time: s_j = β·k_scale_j·(q·codes_j) and o = Σ_j (p_j·v_scale_j)·codes_j, so the row's max,
// its sum and the P·V loop are the float cache's.
//
// Why a path of its own (docs/performance.md, "Decoding"): with 4 lanes the general loop
// padded them to a 16-lane tile, so the softmax ran 4× the exps it needed, each (key,
// lane) dot product ended in a full horizontal sum, and O went through a copy per tile
// for the non-finite check. Here a score block is W dot products reduced together into
// one vector (on AVX-512 45 shuffles and adds instead of 16 reductions), the softmax runs
// on those vectors (no padding lanes), O is double-buffered (no copy), and the prefetches
// of the rows ahead are spread through the loops that read them (K's through the score
// loop, V's through the P·V loop) instead of issued as one burst.
//
// Layout of a score vector with NL lanes: element e = l·KB + c holds lane l, key c of a
// block of KB = kKeysPerLane<NL> keys. One, two or Ops::kGroupLanes lanes per group, and
// three where Ops::kThreeLanes (3, 5 or 6 lanes: GQA groups of 3, 5 and 6, as Qwen2.5's); without it
// three take four, the fourth a zero query whose results are dropped. Groups enough for kFewLanes.

// Keys per lane in a score vector of NL lanes: W / NL, rounded down to a power of two so that a
// lane's keys are an aligned group (Ops::group_reduce). With three lanes (Ops::kThreeLanes) a
// vector holds room for four: the fourth lane's elements are never computed (zero accumulators),
// never read by P·V or the output, and their max and sum stay in their own group.
template <int NL>
constexpr int kKeysPerLane = [] {
  int kb = 1;
  while (2 * kb <= W / NL) kb *= 2;
  return kb;
}();

// The few-lane loop's constants (kernel/common.inl), so both paths tune together.
constexpr i64 kKeys = kFewTileCols;  // keys per tile; split boundaries are multiples of it
// K and V rows are prefetched this many keys ahead, into L2: twice forward_few_lanes'
// distance, since each is issued while its own half of the tile runs (64 to 128 measured
// within noise of each other, docs/performance.md).
constexpr i64 kPrefetchKeys = 2 * kFewPrefetchKeys;
using Mask = Ops::Mask;                        // which floats of a vector a partial load reads
constexpr i64 kGroupLanes = Ops::kGroupLanes;  // lanes sharing a score block, at most
constexpr i64 kMaxGroups = kFewLanes / kGroupLanes;
static_assert(kKeys % W == 0 && kMaxGroups * kGroupLanes == kFewLanes && W / kGroupLanes >= 2);
// Split boundaries are multiples of kTileCols (api.cpp), so a tile never straddles one and
// the item's mask test need not look at the split (tile_needs_mask in item below).
static_assert(kTileCols % kKeys == 0);

// A quantized cache's code types (problem.hpp). E4M3 bytes load as value × 2^-8 (Ops puts the
// byte into an fp16's bits, which vcvtph2ps widens: exact, subnormals included), so their scales
// are taken × 2^8.
template <class E>
constexpr bool kIsCode = std::is_same_v<E, I8Code> || std::is_same_v<E, E4M3Code>;
template <class E>
constexpr float kCodeUnit = std::is_same_v<E, E4M3Code> ? 256.0f : 1.0f;

// The elements of a (B, H, N, D) input in its dtype E (DtypeView: fp32 in data, 16-bit in bits).
template <class E>
inline const E* elements(const InView& x) {
  if constexpr (std::is_same_v<E, float>)
    return x.data;
  else
    return static_cast<const E*>(x.bits);
}

// One score block: KB keys (rows k[c] of E) × NL lanes (q rows of ldq floats, zero past Dk).
// pf_k: K rows to prefetch (null: none), a vector's worth per step, spread through the loop
// (docs/performance.md, "Decoding": a burst per block, or one prefetch per 64-byte line,
// measured slower from memory).
template <int NL, class E>
inline R score_block(const E* const* k, const float* q, i64 ldq, i64 Dk, const E* const* pf_k) {
  constexpr int KB = kKeysPerLane<NL>;
  R a[W];
  SDPA_UNROLL
  for (auto& x : a) x = Vec::zero();
  const i64 dfull = Dk / W * W;
  // part: whether this is the last, partial vector of the rows (Dk - d floats, under m).
  auto step = [&](i64 d, auto part, Mask m) {
    if (pf_k != nullptr && (sizeof(E) > 1 || d % 64 == 0)) {  // bytes: one prefetch per line
      SDPA_UNROLL
      for (int c = 0; c < KB; ++c) __builtin_prefetch(pf_k[c] + d, 0, 2);
    }
    R qv[NL];
    SDPA_UNROLL
    for (int l = 0; l < NL; ++l) qv[l] = Ops::pin_query(Vec::load(q + l * ldq + d));  // q is zero-padded
    SDPA_UNROLL
    for (int c = 0; c < KB; ++c) {
      const R kv = Ops::pin(decltype(part)::value ? Ops::load_part(k[c] + d, m) : Ops::load(k[c] + d));
      SDPA_UNROLL
      for (int l = 0; l < NL; ++l) a[l * KB + c] = Vec::fma(kv, qv[l], a[l * KB + c]);
    }
  };
  for (i64 d = 0; d < dfull; d += W) step(d, std::false_type{}, Ops::full_mask());
  if (dfull < Dk) step(dfull, std::true_type{}, Ops::part_mask(Dk - dfull));
  return Ops::reduce_all(a);
}

// A tile's keys in runs of kRun whose rows lie at one stride (a paged cache's blocks hold a
// multiple of kRun rows, so a run never straddles two): each run's first K and V row.
constexpr i64 kRun = kDecodeBlockRows;
static_assert(kKeys == 2 * kRun && kRun % W == 0, "a tile is two runs, each whole score vectors");

// On (NL rows of ldo) = alpha·Oo + P·V over CV vectors of the head dimension from column
// e0, keys [0, bc); the last vector loaded under `last` when PART (a partial vector: a
// template flag, so whole vectors take no mask test per key). Returns the sum of O·0 over
// the chunk: NaN iff some output is not finite. (In registers, CV short chains: as a
// reference argument GCC kept it in memory, one load-FMA-store chain through all NL·CV
// outputs.) The keys go KB at a time, one score vector's worth, so each weight's place in
// P is a constant offset from the block's vector (computing c / KB, c % KB per key was a
// quarter of the loop's instructions); the sum order over keys is unchanged. pf holds the V
// rows to prefetch, laid out as V: a vector's worth with each key's loads, spread through the
// loop. TWO: the keys from kRun on are V2's rows (pf2's to prefetch), a paged tile's second
// block, in the same pass and sum order. PART is taken with CV = 1 alone (pv_tile).
template <int NL, int CV, bool PART, bool TWO, class E>
inline R pv_chunk(const E* V, i64 ldv, i64 bc, const float* P, const float* al, const float* Oo, float* On, i64 ldo,
                  i64 e0, Mask last, const E* pf, const E* V2, const E* pf2) {
  constexpr int KB = kKeysPerLane<NL>;
  R acc[NL][CV];
  SDPA_UNROLL
  for (int l = 0; l < NL; ++l) {
    const R av = Vec::set1(al[l * KB]);
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v) acc[l][v] = Vec::mul(Vec::load(Oo + l * ldo + e0 + v * W), av);
  }
  // One key: its V row's chunk at vr (the row to prefetch at pr), lane l's weight at pc[l·KB].
  auto key = [&](const E* vr, const E* pr, const float* pc) {
    R vv[CV];
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v)
      vv[v] = Ops::pin(PART && v == CV - 1 ? Ops::load_part(vr + v * W, last) : Ops::load(vr + v * W));
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v)  // bytes: one prefetch per line
      if (sizeof(E) > 1 || (e0 + v * W) % 64 == 0) __builtin_prefetch(pr + v * W, 0, 2);
    SDPA_UNROLL
    for (int l = 0; l < NL; ++l) {
      const R pv = Vec::set1(pc[l * KB]);
      SDPA_UNROLL
      for (int v = 0; v < CV; ++v) acc[l][v] = Vec::fma(pv, vv[v], acc[l][v]);
    }
  };
  const E* vr = V + e0;
  const E* pr = pf + e0;
  const float* pb = P;
  i64 c = 0;
  auto blocks_to = [&](i64 end) {  // the keys up to end, KB at a time
    for (; c + KB <= end; c += KB, vr += KB * ldv, pr += KB * ldv, pb += W) {
      SDPA_UNROLL
      for (int cc = 0; cc < KB; ++cc) key(vr + cc * ldv, pr + cc * ldv, pb + cc);
    }
  };
  if constexpr (TWO) {  // kRun is whole score vectors: the second run starts a block
    blocks_to(kRun);
    vr = V2 + e0, pr = pf2 + e0;
  }
  blocks_to(bc);
  for (i64 cc = 0; c + cc < bc; ++cc)  // the last keys, fewer than KB
    key(vr + cc * ldv, pr + cc * ldv, pb + cc);
  const R zero = Vec::zero();
  R chk[CV];
  SDPA_UNROLL
  for (int v = 0; v < CV; ++v) chk[v] = zero;
  SDPA_UNROLL
  for (int l = 0; l < NL; ++l) {
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v) {
      Vec::store(On + l * ldo + e0 + v * W, acc[l][v]);
      chk[v] = Vec::fma(acc[l][v], zero, chk[v]);
    }
  }
  SDPA_UNROLL
  for (int v = 1; v < CV; ++v) chk[0] = Vec::add(chk[0], chk[v]);
  return chk[0];
}

// The same with zero weights skipped, so a zero weight never multiplies an inf or NaN in V
// (what the general path computes when V is not finite). Rare: a tile whose fast result
// came out non-finite is redone with it.
template <int NL, class E>
inline void pv_skip_zero(const E* V, i64 ldv, i64 bc, i64 Dv, const float* P, const float* al, const float* Oo,
                         float* On, i64 ldo) {
  constexpr int KB = kKeysPerLane<NL>;
  for (int l = 0; l < NL; ++l) {
    for (i64 e = 0; e < Dv; ++e) On[l * ldo + e] = Oo[l * ldo + e] * al[l * KB];
    for (i64 c = 0; c < bc; ++c) {
      const float w = P[(c / KB) * W + c % KB + l * KB];
      if (w == 0.0f) continue;
      for (i64 e = 0; e < Dv; ++e)
        On[l * ldo + e] = __builtin_fmaf(w, Ops::to_float(V[c * ldv + e]), On[l * ldo + e]);  // as the FMAs above
    }
  }
}

// P·V for one lane group over the whole head dimension, CVMAX vectors at a time: NL·CVMAX
// accumulators, as many as the ISA's registers hold next to the V vectors of a key, and
// at most half of them for one lane so its V vectors fit too; two lanes take Ops::kPvTwoLaneVectors
// (their 2·8 accumulators and 8 V vectors were too many on AVX-512), or kPvTwoLaneCodeVectors over an
// 8-bit cache's codes (where a chunk of 4 cost a second pass over the weights). pf: the V rows to prefetch
// (null: none ahead, and the chunks prefetch the rows they read, already on their way: one instruction
// a vector, where a prefetch-free copy of every chunk doubled the decoding loop's code and compile time).
// TWO: the keys from kRun on (bc > kRun) are V2's rows (pf2's to prefetch). A head dimension that is not
// whole vectors takes its last, partial vector in a pass of its own, so the masked load is one chunk's,
// not every chunk width's; each output's sum over the keys is the same either way.
template <int NL, class E, bool TWO = false>
inline void pv_tile(const E* V, i64 ldv, i64 bc, i64 Dv, const float* P, const float* al, const float* Oo, float* On,
                    i64 ldo, const E* pf, const E* V2 = nullptr, const E* pf2 = nullptr) {
  constexpr int CVMAX = NL == 1   ? Ops::kPvAccumulators / 2
                        : NL == 2 ? (kIsCode<E> ? Ops::kPvTwoLaneCodeVectors : Ops::kPvTwoLaneVectors)
                                  : Ops::kPvAccumulators / NL;
  if (pf == nullptr) pf = V, pf2 = V2;
  const i64 nvec = Dv / W;  // whole vectors
  R chk = Vec::zero();
  // cv: the vector count, as a type; part: whether the last vector is partial (loaded under m), as a type.
  auto masked_chunk = [&](auto cv, i64 e0, auto part, Mask m) {
    chk = Vec::add(chk, pv_chunk<NL, decltype(cv)::value, decltype(part)::value, TWO, E>(V, ldv, bc, P, al, Oo, On, ldo,
                                                                                         e0, m, pf, V2, pf2));
  };
  auto chunk = [&](auto cv, i64 e0) { masked_chunk(cv, e0, std::false_type{}, Ops::full_mask()); };
  i64 v0 = 0;
  for (; v0 + CVMAX <= nvec; v0 += CVMAX) chunk(std::integral_constant<int, CVMAX>{}, v0 * W);
  const i64 e0 = v0 * W;
  with_count<CVMAX - 1>(nvec - v0, [&](auto cv) { chunk(cv, e0); });  // the remaining whole vectors
  if (Dv % W != 0) masked_chunk(std::integral_constant<int, 1>{}, nvec * W, std::true_type{}, Ops::part_mask(Dv % W));
  if (Ops::any_nan(chk)) {
    if constexpr (TWO) {  // the runs one after the other, the second's rescale 1: the same sum order
      constexpr int KB = kKeysPerLane<NL>;
      alignas(64) float ones[W];
      for (float& x : ones) x = 1.0f;
      pv_skip_zero<NL, E>(V, ldv, kRun, Dv, P, al, Oo, On, ldo);
      pv_skip_zero<NL, E>(V2, ldv, bc - kRun, Dv, P + kRun / KB * W, ones, On, On, ldo);
    } else {
      pv_skip_zero<NL, E>(V, ldv, bc, Dv, P, al, Oo, On, ldo);
    }
  }
}

// Whether an item takes this path: any dtype (fp32, bf16, fp16), few lanes, unit-stride K and
// V rows, a paged cache's blocks a multiple of kRun rows, no dropout, and no explicit mask or
// one whose every row is dense (a left or right padding mask, batched generation's): each
// lane's key range then narrows to what its mask row lets through (lane_keys) and the loop
// masks by ranges alone, never reading the mask. The others go to forward_few_lanes (a
// cache's paged or quantized rows: forward_tiled).
inline bool applies(const Problem& p, const Tensors& t, i64 n) {
  return n <= kFewLanes && t.k.stride[3] == 1 && t.v.stride[3] == 1 && (!explicit_mask(p) || p.mask_rows_dense) &&
         !p.has_dropout && p.Nk < (i64{1} << 30) && (t.pages.table == nullptr || t.pages.rows % kRun == 0);
}
template <class E>
struct TileRuns {
  const E* k[2];
  const E* v[2];
  const float* ks[2];  // a quantized cache's: the runs' first K and V scales (else null)
  const float* vs[2];
  // Row r of the tile (r < kKeys).
  const E* k_row(i64 r, i64 ldk) const { return k[r / kRun] + r % kRun * ldk; }
  // Whether the second run's V rows follow the first's at the row stride (one V run).
  bool adjacent(i64 ldv) const { return v[1] == v[0] + kRun * ldv; }
};

// The rows of one (b, kv head): K and V as strided views, or in a paged cache's blocks (KvPages),
// and a quantized cache's scales (KvCodes; one per key, unit stride within a view or a block).
template <class E>
struct HeadRows {
  const E* k;
  const E* v;
  i64 ldk, ldv;
  KvPages pages;
  const float* ks = nullptr;
  const float* vs = nullptr;
  i64 ks_block = 0, vs_block = 0;
  HeadRows() = default;
  HeadRows(const Tensors& t, i64 b, i64 g)
      : k(elements<E>(t.k) + off(t.k, b, g, 0, 0)),
        v(elements<E>(t.v) + off(t.v, b, g, 0, 0)),
        ldk(t.k.stride[2]),
        ldv(t.v.stride[2]),
        pages(t.pages) {
    if constexpr (kIsCode<E>) {
      ks = t.codes.k_scale + g * t.codes.k_head, vs = t.codes.v_scale + g * t.codes.v_head;
      ks_block = t.codes.k_block, vs_block = t.codes.v_block;
    }
  }
  // The runs of the tile from key j0 (a multiple of kKeys) of a head of nk keys. A run that starts
  // at or past nk is never read (rows past nk are clamped to nk - 1, in the first run's tile); it
  // takes the first run's rows, so no block-table entry past the sequence's last is read.
  TileRuns<E> tile(i64 j0, i64 nk) const {
    TileRuns<E> r;
    for (int x = 0; x < 2; ++x) {
      const i64 j = j0 + x * kRun < nk ? j0 + x * kRun : j0;
      if (pages.table == nullptr) {
        r.k[x] = k + j * ldk, r.v[x] = v + j * ldv;
        if constexpr (kIsCode<E>) r.ks[x] = ks + j, r.vs[x] = vs + j;
      } else {
        const i64 blk = pages.table[j / pages.rows], row = j % pages.rows;
        r.k[x] = k + blk * pages.k_block + row * ldk, r.v[x] = v + blk * pages.v_block + row * ldv;
        if constexpr (kIsCode<E>) r.ks[x] = ks + blk * ks_block + row, r.vs[x] = vs + blk * vs_block + row;
      }
    }
    return r;
  }
};

// One item's buffers: each of its kv heads' queries and output (PassBuffers; one head but where the
// item takes several, heads_item), and the probabilities of the tile at hand, which the heads share
// (each head fills and reads them within one tile). `slots` is a head's lanes rounded up to whole
// groups (at most kFewLanes), and `score_lanes` the lanes its groups' score vectors hold (slots, or
// 4 a group of three).
struct PassBuffers {
  float* Q;     // (slots, dkp)  queries as rows, zero past Dk and past the last lane
  float* O[2];  // (slots, dvp)  unnormalised output, double-buffered
};
struct Scratch {
  PassBuffers pass[kMaxItemHeads];
  float* P;  // (score_lanes, kKeys) probabilities, per group in score-vector layout
  static Scratch carve(const Problem& p, Arena& arena, i64 slots, i64 score_lanes, i64 heads) {
    const i64 dkp = round_up(p.Dk, kPad), dvp = round_up(p.Dv, kPad);
    Scratch s;
    for (i64 h = 0; h < heads; ++h) {
      s.pass[h].Q = arena.take(slots * dkp);
      s.pass[h].O[0] = arena.take(slots * dvp);
      s.pass[h].O[1] = arena.take(slots * dvp);
    }
    s.P = arena.take(score_lanes * kKeys);
    return s;
  }
};

// One (b, kv head, lane tile)'s pass over its keys, its lanes in groups of NL, K and V read as E:
// the lanes' queries, running max and sum and output, advanced a tile of kKeys keys at a time (tile,
// for the tiles from first_tile() to last) and written at the end (finish: out and lse, or the
// split's partial results, as the other forward loops do). An item runs one pass (item) or several
// heads' passes tile by tile (heads_item: a tokens-major cache, or a heads-major one in short blocks);
// a pass's arithmetic is the same either way.
// PAGED: K and V in a paged cache's blocks (Tensors::pages), resolved per run of kRun keys; else the
// strided views' rows, addressed as they always were (a template flag: the contiguous loop measured
// 3-5 % slower at 4096 keys with the run lookups in it).
template <int NL, class E, bool PAGED>
struct Pass {
  static constexpr int KB = kKeysPerLane<NL>;
  static constexpr i64 blocks = kKeys / KB;
  static constexpr i64 group_floats = blocks * W;  // a group's P: its score vectors
  static constexpr i64 max_groups = kFewLanes / NL;

  const Problem* p_;
  const Tensors* t_;
  const ForwardItem* it_;
  const ItemLanes* lanes_;
  HeadRows<E> rows;
  float* Q;
  float* P;
  float* O[2];
  i64 groups, dkp, dvp;
  LanesSee see;
  i64 first, last;  // the keys some lane sees within the item's split
  int cur;          // O[cur]: the output so far
  // K and V rows are prefetched this many keys ahead: kPrefetchKeys, or one tile where an item takes
  // several heads (heads_item), whose passes run a tile of every head before the next: two tiles
  // ahead (256 KiB of eight fp32 heads' K and V) measured 1.3x slower, four 1.4x (docs/performance.md).
  i64 ahead_keys;
  alignas(64) float al[max_groups][W];  // each group's rescale factors (score-vector layout)
  // Each lane's visible keys [lo, hi] within this item's split; padding slots copy lane 0.
  alignas(64) int lo_e[max_groups][W], hi_e[max_groups][W];
  R m[max_groups], l[max_groups];  // running max (per lane, in all its elements), partial sums
  R beta, code_unit, cap, inv_cap;  // the score scale (× 2^8 for e4m3 codes), 2^8, the soft-cap and its inverse
  alignas(64) int c_e[W];           // each score-vector element's key within its lane's KB
  alignas(64) float ones[W];        // the rescale of a tile's second run of keys (pv_tile)

  void start(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes, PassBuffers buf,
             float* probs, i64 heads) {
    p_ = &p, t_ = &t, it_ = &it, lanes_ = &lanes;
    ahead_keys = heads == 1 ? kPrefetchKeys : kKeys;
    const i64 b = it.b, n = lanes.n, Dk = p.Dk;
    dkp = round_up(Dk, kPad), dvp = round_up(p.Dv, kPad);
    groups = (n + NL - 1) / NL;
    const i64 slots = groups * NL;
    Q = buf.Q, O[0] = buf.O[0], O[1] = buf.O[1], P = probs, cur = 0;
    for (i64 x = 0; x < slots * dkp; ++x) Q[x] = 0.0f;
    for (i64 r = 0; r < n; ++r) load_row(t.q, off(t.q, b, lanes.h[r], lanes.i[r], 0), Dk, Q + r * dkp, 1);
    for (i64 x = 0; x < slots * dvp; ++x) O[0][x] = 0.0f;
    for (i64 gi = 0; gi < max_groups; ++gi)  // a group of three's unused elements: an empty range
      for (int e = 0; e < W; ++e) lo_e[gi][e] = 0, hi_e[gi][e] = -1;
    for (i64 r = 0; r < slots; ++r) {
      const i64 i = lanes.i[r < n ? r : 0];
      const KeyRange keys = visible_keys(
          lanes_see(p, b, 1, i, i, [&](i64) { return LaneRow{lanes.h[r < n ? r : 0], i}; }), it.j_begin, it.j_end);
      for (int c = 0; c < KB; ++c) {
        lo_e[r / NL][(r % NL) * KB + c] = static_cast<int>(keys.first);
        hi_e[r / NL][(r % NL) * KB + c] = static_cast<int>(keys.last);
      }
    }
    see = item_sees(p, b, lanes);
    const KeyRange keys = visible_keys(see, it.j_begin, it.j_end);
    first = keys.first, last = keys.last;
    for (i64 gi = 0; gi < groups; ++gi) m[gi] = Vec::set1(kNegInf), l[gi] = Vec::zero();
    rows = HeadRows<E>(t, b, it.g);
    beta = Vec::set1(static_cast<float>(p.scale) * kCodeUnit<E>);
    code_unit = Vec::set1(kCodeUnit<E>);
    cap = Vec::set1(static_cast<float>(p.softcap));
    inv_cap = Vec::set1(static_cast<float>(1.0 / p.softcap));
    for (int e = 0; e < W; ++e) c_e[e] = e % KB, ones[e] = 1.0f;
  }
  i64 first_tile() const { return first / kKeys * kKeys; }

  // The tile of keys from j0 (a multiple of kKeys, from first_tile() to last). Inlined, and the call's
  // constants (beta, c_e, ...) set once in start: a one-head item runs within 1-2 % of the loop as it
  // was before the passes (in cache, one thread); as a call that rebuilt them each tile, int8 3-4 % slower.
  __attribute__((always_inline)) void tile(i64 j0) {
    const Problem& p = *p_;
    const Tensors& t = *t_;
    const i64 Dk = p.Dk, Dv = p.Dv;
    const E* Kb = rows.k;
    const E* Vb = rows.v;
    const i64 ldk = t.k.stride[2], ldv = t.v.stride[2];

    const i64 bc = imin(kKeys, p.Nk - j0);
    // Only the lanes' ranges and Nk cut a tile (split boundaries do not: see kKeys).
    const bool mask = tile_needs_mask(see, j0, kKeys);
    // The tile's runs of kRun keys, and those of the tile ahead_keys ahead where it is in range.
    TileRuns<E> tile{}, ahead{};
    const bool pf_tile = j0 + kKeys - 1 + ahead_keys <= last;  // the whole tile ahead: V's prefetches
    if constexpr (PAGED) {
      tile = rows.tile(j0, p.Nk);
      ahead = j0 + ahead_keys <= last ? rows.tile(j0 + ahead_keys, p.Nk) : tile;
    } else if constexpr (kIsCode<E>) {
      tile = rows.tile(j0, p.Nk);  // its scales
    }
    // A quantized cache: the tile's scales per run. The last tile's keys past Nk take scale 0 (their
    // scores are masked; their scales, past the sequence, may be anything, and a NaN one times a zero
    // weight would spoil P·V).
    const float* ksr[2] = {tile.ks[0], tile.ks[1]};
    const float* vsr[2] = {tile.vs[0], tile.vs[1]};
    alignas(64) float kpad[kIsCode<E> ? kKeys : 1], vpad[kIsCode<E> ? kKeys : 1];
    if constexpr (kIsCode<E>) {
      if (bc < kKeys) {
        for (i64 c = 0; c < kKeys; ++c) {
          kpad[c] = c < bc ? tile.ks[c / kRun][c % kRun] : 0.0f;
          vpad[c] = c < bc ? tile.vs[c / kRun][c % kRun] : 0.0f;
        }
        ksr[0] = kpad, ksr[1] = kpad + kRun, vsr[0] = vpad, vsr[1] = vpad + kRun;
      }
    }
    // Score block kb's KB scales (keys kb·KB.. of the tile, within one run), in score-vector layout.
    auto scales = [&](const float* const* run, i64 kb) {
      return Ops::load_keys<KB>(run[kb * KB / kRun] + kb * KB % kRun);
    };
    for (i64 gi = 0; gi < groups; ++gi) {
      R sc[blocks];  // the tile's score vectors
      for (i64 kb = 0; kb < blocks; ++kb) {
        const i64 jb = j0 + kb * KB;
        const E* kr[KB];
        const E* pk[KB] = {};
        for (int c = 0; c < KB; ++c)  // rows past Nk: masked below
          kr[c] = PAGED ? tile.k_row(imin(jb + c, p.Nk - 1) - j0, ldk) : Kb + imin(jb + c, p.Nk - 1) * ldk;
        const bool pf = gi == 0 && jb + ahead_keys + KB - 1 <= last;
        if (pf)
          for (int c = 0; c < KB; ++c)
            pk[c] = PAGED ? ahead.k_row(kb * KB + c, ldk) : Kb + (jb + ahead_keys + c) * ldk;
        R x = score_block<NL, E>(kr, Q + gi * NL * dkp, dkp, Dk, pf ? pk : nullptr);
        if constexpr (kIsCode<E>)
          x = Vec::mul(x, Vec::mul(scales(ksr, kb), beta));
        else
          x = Vec::mul(x, beta);
        if (p.has_softcap) x = Vec::mul(cap, Vec::tanh(Vec::mul(x, inv_cap)));
        if (mask) x = Ops::hide_outside(x, static_cast<int>(jb), c_e, lo_e[gi], hi_e[gi]);
        sc[kb] = x;
      }
      // Online softmax over the tile's score vectors, a lane's max taken over its KB keys.
      float* Pg = P + gi * group_floats;
      const R alpha = online_softmax_step(
          m[gi], l[gi], blocks, [&](i64 kb) { return sc[kb]; }, [](R x) { return Ops::group_reduce<KB, true>(x); },
          [&](i64 kb, R e) {
            if constexpr (kIsCode<E>)  // the V scales (× 2^8 for e4m3), so P·V runs on the codes
              e = Vec::mul(e, kCodeUnit<E> == 1.0f ? scales(vsr, kb) : Vec::mul(scales(vsr, kb), code_unit));
            Vec::store(Pg + kb * W, e);
          });
      Vec::store(al[gi], alpha);
      const bool pf = gi == 0 && pf_tile;
      float* const Oo = O[cur] + gi * NL * dvp;
      float* const On = O[cur ^ 1] + gi * NL * dvp;
      if constexpr (!PAGED) {
        pv_tile<NL, E>(Vb + j0 * ldv, ldv, bc, Dv, Pg, al[gi], Oo, On, dvp,
                       pf ? Vb + (j0 + ahead_keys) * ldv : nullptr);
      } else if (bc <= kRun || (tile.adjacent(ldv) && (!pf || ahead.adjacent(ldv)))) {  // one V run
        pv_tile<NL, E>(tile.v[0], ldv, bc, Dv, Pg, al[gi], Oo, On, dvp, pf ? ahead.v[0] : nullptr);
      } else if (kIsCode<E> && ldv == Dv) {  // codes, each run's rows one piece: one pass (docs/performance.md)
        pv_tile<NL, E, kIsCode<E>>(tile.v[0], ldv, bc, Dv, Pg, al[gi], Oo, On, dvp, pf ? ahead.v[0] : nullptr,
                                   tile.v[1], pf ? ahead.v[1] : nullptr);
      } else {  // two blocks: the second run's P·V added onto the first's (rescale 1), the same sum order
        pv_tile<NL, E>(tile.v[0], ldv, kRun, Dv, Pg, al[gi], Oo, On, dvp, pf ? ahead.v[0] : nullptr);
        pv_tile<NL, E>(tile.v[1], ldv, bc - kRun, Dv, Pg + kRun / KB * W, ones, On, On, dvp, pf ? ahead.v[1] : nullptr);
      }
    }
    cur ^= 1;
  }

  void finish() const {
    const ItemLanes& lanes = *lanes_;
    alignas(64) float mf[max_groups][W], lf[max_groups][W];
    for (i64 gi = 0; gi < groups; ++gi) {
      Vec::store(mf[gi], m[gi]);
      Vec::store(lf[gi], Ops::group_reduce<KB, false>(l[gi]));
    }
    for (i64 r = 0; r < lanes.n; ++r)
      finish_row(*p_, *t_, *it_, it_->b, lanes.h[r], lanes.i[r], r, mf[r / NL][(r % NL) * KB],
                 lf[r / NL][(r % NL) * KB], O[cur] + r * dvp);
  }
};

// Score-vector lanes a head's groups of NL take: a group of three holds room for four.
template <int NL>
constexpr i64 kScoreLanes = W / kKeysPerLane<NL>;

// One kv head's item: its pass over its split's keys.
template <int NL, class E, bool PAGED>
void item(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes, WorkerScratch scratch) {
  const i64 groups = (lanes.n + NL - 1) / NL;
  const auto s = carve_scratch<Scratch>(p, scratch, groups * NL, groups * kScoreLanes<NL>, i64{1});
  Pass<NL, E, PAGED> pass;
  pass.start(p, t, it, lanes, s.pass[0], s.P, 1);
  for (i64 j0 = pass.first_tile(); j0 <= pass.last; j0 += kKeys) pass.tile(j0);
  pass.finish();
}

// Several kv heads' items (its[0..heads), the same split and lane tile), their passes taken tile by
// tile: a tokens-major cache's rows of every head at a key lie together, so the heads' reads of a
// tile meet in the same pages, where one head's pass at a time reads a few lines of each
// (docs/performance.md, "Decoding from an 8-bit KV cache, and the cache's layout"); a heads-major
// cache's short blocks (api.cpp, item_heads) are then read whole, one after the other. Each pass's tiles
// and arithmetic are its own item's: the bits are those of the heads taken one by one.
template <int NL, class E, bool PAGED>
void heads_item(const Problem& p, const Tensors& t, const ForwardItem* its, const ItemLanes* lanes, i64 heads,
                WorkerScratch scratch) {
  const i64 groups = (lanes[0].n + NL - 1) / NL;  // every head's item has the same lane count
  const auto s = carve_scratch<Scratch>(p, scratch, groups * NL, groups * kScoreLanes<NL>, heads);
  Pass<NL, E, PAGED> passes[kMaxItemHeads];
  i64 j_first = p.Nk, j_last = -1;
  for (i64 h = 0; h < heads; ++h) {
    passes[h].start(p, t, its[h], lanes[h], s.pass[h], s.P, heads);
    j_first = imin(j_first, passes[h].first_tile()), j_last = imax(j_last, passes[h].last);
  }
  for (i64 j0 = j_first; j0 <= j_last; j0 += kKeys)
    for (i64 h = 0; h < heads; ++h)
      if (j0 >= passes[h].first_tile() && j0 <= passes[h].last) passes[h].tile(j0);
  for (i64 h = 0; h < heads; ++h) passes[h].finish();
}

// Runs the item (its[0..heads): one kv head's, or several heads' of the same split and lane tile) with
// the widest lane group its lane count fills; three, five or six lanes (GQA groups of 3, 5 and 6) in
// groups of three where the ISA takes them: a quarter fewer FMAs than groups of four (five lanes: two
// groups of three, six slots, against two of four, eight).
template <int NL, class E, bool PAGED>
void run_item(const Problem& p, const Tensors& t, const ForwardItem* its, const ItemLanes* lanes, i64 heads,
              WorkerScratch scratch) {
  if (heads == 1) return item<NL, E, PAGED>(p, t, its[0], lanes[0], scratch);
  heads_item<NL, E, PAGED>(p, t, its, lanes, heads, scratch);
}
template <class E, bool PAGED>
void forward_lanes(const Problem& p, const Tensors& t, const ForwardItem* its, const ItemLanes* lanes, i64 heads,
                   WorkerScratch scratch) {
  const i64 n = lanes[0].n;
  if (n == 1) return run_item<1, E, PAGED>(p, t, its, lanes, heads, scratch);
  if constexpr (Ops::kThreeLanes)
    if (n == 3 || n == 5 || n == 6) return run_item<3, E, PAGED>(p, t, its, lanes, heads, scratch);
  if (n == 2 || kGroupLanes == 2) return run_item<2, E, PAGED>(p, t, its, lanes, heads, scratch);
  run_item<kGroupLanes, E, PAGED>(p, t, its, lanes, heads, scratch);
}

// The item with K and V read as E, from strided views or a paged cache.
template <class E>
void forward_as(const Problem& p, const Tensors& t, const ForwardItem* its, const ItemLanes* lanes, i64 heads,
                WorkerScratch scratch) {
  if (t.pages.table != nullptr) return forward_lanes<E, true>(p, t, its, lanes, heads, scratch);
  forward_lanes<E, false>(p, t, its, lanes, heads, scratch);
}

// The one dispatch on the call's dtype, or on a quantized cache's codes (q in the call's dtype), for
// the items its[0..heads) with lanes[0..heads) (forward.inl: one, or several heads: api.cpp, item_heads).
inline void forward(const Problem& p, const Tensors& t, const ForwardItem* its, const ItemLanes* lanes, i64 heads,
                    WorkerScratch scratch) {
  switch (t.codes.kind) {
    case KvCodes::Kind::int8: return forward_as<I8Code>(p, t, its, lanes, heads, scratch);
    case KvCodes::Kind::fp8_e4m3: return forward_as<E4M3Code>(p, t, its, lanes, heads, scratch);
    case KvCodes::Kind::none: break;
  }
  switch (p.dtype) {
    case Dtype::f32: return forward_as<float>(p, t, its, lanes, heads, scratch);
    case Dtype::bf16: return forward_as<bf16>(p, t, its, lanes, heads, scratch);
    case Dtype::fp16: return forward_as<fp16>(p, t, its, lanes, heads, scratch);
  }
}
