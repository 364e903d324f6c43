// common.inl — what every loop of the attention kernel shares, each written once:
// the visible key range, the masks, the online softmax step, the scratch arena, an item's
// lanes and the write of a finished row. Included inside one namespace per ISA after that
// ISA's `Vec` (simd_*.hpp); used by the tile loops and by
// decode.inl (the fused decoding loop). Only builtins, intrinsics and functions
// defined in the namespace are called, so no inline function compiled for one ISA is
// shared with another (ODR safety; kernel.isa_objects_share_no_inline_code).
//
// Notation: a tile has query lanes r (rows i) and keys c (j = j0 + c).

// Loops over compile-time counts (lanes, keys of a block, vectors of a chunk, a GEMM
// block's rows) are unrolled before GCC's scalar replacement runs: at -O3 it otherwise
// keeps accumulator arrays in memory (kernel/decode.inl's P·V loop stored all of them to the
// stack on every key; the GEMM block went through the stack before and after its loop).
#define SDPA_UNROLL _Pragma("GCC unroll 16")

using R = typename Vec::R;
constexpr int W = Vec::W;
constexpr float kNegInf = -__builtin_inff();
constexpr float kPosInf = __builtin_inff();

inline i64 imin(i64 a, i64 b) { return a < b ? a : b; }
inline i64 imax(i64 a, i64 b) { return a > b ? a : b; }
inline i64 round_up(i64 x, i64 m) { return (x + m - 1) / m * m; }
inline bool is_finite(float x) { return x - x == 0.0f; }  // false for ±inf and NaN

// f(std::integral_constant<int, n>{}) for a run-time n in [1, N], nothing for another n: the
// remainder of a loop over compile-time blocks (a chunk's vectors, a GEMM block's rows or
// vectors, a few-lane block), each count its own instantiation of f.
template <class F, int... C>
inline void with_count_of(i64 n, F& f, std::integer_sequence<int, C...>) {
  (void)((n == C + 1 && (f(std::integral_constant<int, C + 1>{}), true)) || ...);
}
template <int N, class F>
inline void with_count(i64 n, F&& f) {
  with_count_of(n, f, std::make_integer_sequence<int, N>{});
}

// Element offsets of a (B, H, N, D) view and of a (B, H, N) one, const or not.
template <class T>
inline i64 off(const View4<T>& v, i64 a, i64 b, i64 c, i64 d) {
  return a * v.stride[0] + b * v.stride[1] + c * v.stride[2] + d * v.stride[3];
}
template <class T>
inline i64 off(const View3<T>& v, i64 a, i64 b, i64 c) {
  return a * v.stride[0] + b * v.stride[1] + c * v.stride[2];
}

// ---------------------------------------------------------------------------------------
// 16-bit tensors (Problem::dtype bf16 or fp16) are widened to fp32 on load and rounded to
// their dtype once on store, by this ISA's bulk converters (convert.hpp: F16C on AVX2); fp32
// tensors are read and written in place. kIsa is set by the including fast_<isa>.cpp.
inline const ConvertKernels& converters() { return convert_kernels(kIsa); }

// Row `o` of x (D elements, one every x.stride[3]) as floats at dst[d·dst_step].
inline void load_row(const InView& x, i64 o, i64 D, float* dst, i64 dst_step) {
  const i64 step = x.stride[3];
  if (x.dtype == Dtype::f32) {
    for (i64 d = 0; d < D; ++d) dst[d * dst_step] = x.data[o + d * step];
    return;
  }
  const ConvertKernels& cv = converters();
  const auto widen = [&](i64 e, i64 n, float* to) {  // n elements from e, unit stride
    if (x.dtype == Dtype::bf16) return cv.bf16_to_float(static_cast<const bf16*>(x.bits) + o + e, to, n);
    cv.fp16_to_float(static_cast<const fp16*>(x.bits) + o + e, to, n);
  };
  if (step == 1 && dst_step == 1) return widen(0, D, dst);
  constexpr i64 kChunk = 64;
  float chunk[kChunk];
  for (i64 d0 = 0; d0 < D; d0 += kChunk) {
    const i64 n = imin(kChunk, D - d0);
    if (step == 1) {
      widen(d0, n, chunk);
    } else {
      for (i64 d = 0; d < n; ++d) widen((d0 + d) * step, 1, chunk + d);
    }
    for (i64 d = 0; d < n; ++d) dst[(d0 + d) * dst_step] = chunk[d];
  }
}

// D floats from src stored as row `o` of x (one every x.stride[3]), rounded to x's dtype.
inline void store_row(const OutView& x, i64 o, i64 D, const float* src) {
  const i64 step = x.stride[3];
  if (x.dtype == Dtype::f32) {
    for (i64 d = 0; d < D; ++d) x.data[o + d * step] = src[d];
    return;
  }
  const ConvertKernels& cv = converters();
  const i64 runs = step == 1 ? 1 : D, run = step == 1 ? D : 1;  // unit stride: one run of D
  for (i64 r = 0; r < runs; ++r) {
    if (x.dtype == Dtype::bf16)
      cv.float_to_bf16(src + r, static_cast<bf16*>(x.bits) + o + r * step, run);
    else
      cv.float_to_fp16(src + r, static_cast<fp16*>(x.bits) + o + r * step, run);
  }
}

// ---------------------------------------------------------------------------------------
// Visible keys. Query row i sees keys [row_lo(i), row_hi(i)] under the structural mask
// (causal, window); with none, [0, Nk - 1]. Mirrors Problem::lo/hi, redefined here so the
// ISA namespaces share no inline code. Both bounds grow with i.
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

// A lane of a tile: its query head and row.
struct LaneRow {
  i64 h, i;
};

struct KeyRange {
  i64 first, last;  // keys [first, last]; none when last < first
};

inline bool explicit_mask(const Problem& p) { return p.mask.data != nullptr || p.keep.data != nullptr; }

// The keys query row i of head h, batch b sees: the structural range ∩ what its explicit mask
// row lets through (Problem::mask_rows, computed once per call), and whether the explicit
// masks leave every key of that range as it is (dense: keep set, bias ±0), so that a tile
// inside the range needs no mask at all. Without a table (never on the fast path's calls)
// an explicit mask counts as not dense: every tile is masked element by element.
struct LaneKeys {
  KeyRange keys;
  bool dense;
};
inline LaneKeys lane_keys(const Problem& p, i64 b, i64 h, i64 i) {
  const KeyRange structural{row_lo(p, i), row_hi(p, i)};
  if (!explicit_mask(p)) return {structural, true};
  if (p.mask_rows == nullptr) return {structural, false};
  const MaskRow& row = p.mask_rows[b * p.mask_row_stride[0] + h * p.mask_row_stride[1] + i * p.mask_row_stride[2]];
  return {{imax(structural.first, row.first), imin(structural.last, row.last)}, row.dense};
}

// What a set of lanes (a tile's, or an item's) sees, the one summary every loop asks:
//   any   the hull of the keys some lane sees: a key tile outside it changes nothing and is
//         skipped (every score of it would be -inf: the running max stays, each weight is
//         exp(-inf) = 0, and V and K rows are only ever multiplied by such a weight through
//         gemm_acc_skip_zero, which never lets 0·NaN from a masked row through);
//   all   keys that every lane sees plainly: a tile inside it needs no mask_tile.
// Structural masks alone: both from the extreme rows (both bounds grow with i). With an
// explicit mask: lane by lane from lane_keys, lanes at lane_at(r), r < n, batch b. So a mask
// equal to a structural one (causal as a keep mask, a window, left padding) skips the same
// tiles and masks the same ones as the structural call: the same operations, the same bits.
struct LanesSee {
  KeyRange any, all;
};
template <class LaneAt>
inline LanesSee lanes_see(const Problem& p, i64 b, i64 n, i64 i_min, i64 i_max, LaneAt lane_at) {
  if (!explicit_mask(p)) return {{row_lo(p, i_min), row_hi(p, i_max)}, {row_lo(p, i_max), row_hi(p, i_min)}};
  LanesSee see{{p.Nk, -1}, {0, p.Nk - 1}};
  for (i64 r = 0; r < n; ++r) {
    const LaneRow lane = lane_at(r);
    const LaneKeys lk = lane_keys(p, b, lane.h, lane.i);
    if (lk.keys.first <= lk.keys.last)
      see.any.first = imin(see.any.first, lk.keys.first), see.any.last = imax(see.any.last, lk.keys.last);
    see.all.first = imax(see.all.first, lk.keys.first), see.all.last = imin(see.all.last, lk.keys.last);
    if (!lk.dense) see.all = {0, -1};  // stays empty: every tile is masked
  }
  return see;
}
// The keys within [j_begin, j_end) (j_end <= Nk) that some lane sees.
inline KeyRange visible_keys(const LanesSee& see, i64 j_begin, i64 j_end) {
  return {imax(see.any.first, j_begin), imin(see.any.last, j_end - 1)};
}
// Whether a tile of keys [j0, j0 + cols) needs mask_tile: some lane does not see every key
// plainly (keys past Nk, i.e. padding columns, included).
inline bool tile_needs_mask(const LanesSee& see, i64 j0, i64 cols) {
  return see.all.first > j0 || see.all.last < j0 + cols - 1;
}

// The masks on a tile of scores. Element (r, c) — lane r, key j0 + c — is at
// S[r·rs + c·cs]: rs = ld, cs = 1 for a tile stored row = query (backward pass A);
// rs = 1, cs = ld for one stored row = key (the forward, backward pass B). lane_at(r)
// gives lane r's LaneRow. A key the lane cannot see (one past Nk included) becomes -inf;
// a visible one takes the explicit bias, -inf where that masks it.
// The explicit bias is read along each lane's own mask row (one offset per lane, then a
// stride per key), and where neither mask varies with the head or the query row (a
// key-padding mask, (B or 1, 1, 1, Nk)) it is read once per key and added to the whole
// tile column, W lanes at a time: a per-element 4-d offset cost the forward ~20 % with a
// (B, 1, 1, Nk) keep-mask. A finite or -inf bias leaves a lane the structural mask made
// -inf at -inf, so it may go to every lane of the column; a NaN or +inf one goes only to
// the lanes that see the key, as in the per-lane loop.
inline void add_bias(float& s, float bias) { s = bias == kNegInf ? kNegInf : s + bias; }

template <class LaneAt>
inline void mask_tile(const Problem& p, float* S, i64 rs, i64 cs, i64 lanes, i64 b, i64 j0, i64 cols, LaneAt lane_at) {
  bool all_dense = true;
  for (i64 r = 0; r < lanes; ++r) {  // what each lane cannot see (structural ∩ explicit range, keys past Nk)
    float* s = S + r * rs;
    const LaneRow lane = lane_at(r);
    const LaneKeys lk = lane_keys(p, b, lane.h, lane.i);
    const i64 lo = imax(lk.keys.first, j0) - j0, hi = imin(lk.keys.last, j0 + cols - 1) - j0;  // visible columns [lo, hi]
    for (i64 c = 0; c < imin(lo, cols); ++c) s[c * cs] = kNegInf;
    for (i64 c = imax(hi + 1, 0); c < cols; ++c) s[c * cs] = kNegInf;
    all_dense = all_dense && lk.dense;
  }
  // Dense lanes are done: their explicit masks change nothing inside their range.
  if (!explicit_mask(p) || all_dense) return;
  const bool keep = p.keep.data != nullptr, bias = p.mask.data != nullptr;
  const i64 cols_seen = imin(cols, p.Nk - j0);  // padding columns past Nk are -inf already
  const bool per_key = (!keep || (p.keep.stride[1] == 0 && p.keep.stride[2] == 0)) &&
                       (!bias || (p.mask.stride[1] == 0 && p.mask.stride[2] == 0));
  if (per_key) {
    const std::uint8_t* keep_at = keep ? p.keep.data + off(p.keep, b, 0, 0, j0) : nullptr;
    const float* bias_at_key = bias ? p.mask.data + off(p.mask, b, 0, 0, j0) : nullptr;
    for (i64 c = 0; c < cols_seen; ++c) {
      const float add = keep && keep_at[c * p.keep.stride[3]] == 0 ? kNegInf
                        : bias                                     ? bias_at_key[c * p.mask.stride[3]]
                                                                   : 0.0f;
      if (add == 0.0f) continue;
      float* col = S + c * cs;
      if (!(add == kNegInf || is_finite(add))) {
        for (i64 r = 0; r < lanes; ++r) {
          const i64 i = lane_at(r).i;
          if (j0 + c >= row_lo(p, i) && j0 + c <= row_hi(p, i)) add_bias(col[r * rs], add);
        }
        continue;
      }
      i64 r = 0;
      if (rs == 1 && add == kNegInf) {  // lanes along a vector: whole vectors
        const R neg_inf = Vec::set1(kNegInf);
        for (; r + W <= lanes; r += W) Vec::store(col + r, neg_inf);
      } else if (rs == 1) {
        const R addv = Vec::set1(add);
        for (; r + W <= lanes; r += W) Vec::store(col + r, Vec::add(Vec::load(col + r), addv));
      }
      for (; r < lanes; ++r) add_bias(col[r * rs], add);
    }
    return;
  }
  for (i64 r = 0; r < lanes; ++r) {
    float* s = S + r * rs;
    const LaneRow lane = lane_at(r);
    const LaneKeys lk = lane_keys(p, b, lane.h, lane.i);
    if (lk.dense) continue;
    const i64 lo = imax(lk.keys.first, j0) - j0, hi = imin(lk.keys.last, j0 + cols - 1) - j0;
    const std::uint8_t* keep_row = keep ? p.keep.data + off(p.keep, b, lane.h, lane.i, j0) : nullptr;
    const float* bias_row = bias ? p.mask.data + off(p.mask, b, lane.h, lane.i, j0) : nullptr;
    for (i64 c = lo; c <= hi; ++c) {
      if (keep && keep_row[c * p.keep.stride[3]] == 0)
        s[c * cs] = kNegInf;
      else if (bias)
        add_bias(s[c * cs], bias_row[c * p.mask.stride[3]]);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Dropout multipliers of a tile: M(r, c) = 1/(1 - p) where p_ij of lane r, key j = j0 + c
// survives, else 0, stored at M[r·rs + c·cs] (mask_tile's layouts). The decision is
// sdpa/philox.hpp's dropout_keep8 — the reference kernel's own code — instantiated on this
// ISA's Words: W lanes side by side, one Philox block per vector lane, each block deciding
// eight neighbouring keys of its lane by its eight 16-bit halves (FlashAttention's
// dropout.h also spends one Philox call on several elements, 16 bytes against an 8-bit
// threshold). So the mask is the same in the forward and both backward schedules, for any
// tile order and thread. Positions are the sequence's (Dropout::row0, key0): the tile's
// keys are [g0, g0 + cols), g0 = key0 + j0, and since key0 (a block's start, e.g. a shard
// boundary) need not be a multiple of 8, the loop runs over the key octets that overlap the
// tile and stores the decisions of each that fall inside it — for an aligned g0 exactly the
// tile's own octets. With rs = 1 (lanes along a vector) whole vectors are stored: M needs
// room for round_up(lanes, W) lanes; otherwise (keys along a vector) each block's eight
// vectors are transposed through a small buffer.
template <class LaneAt>
inline void dropout_tile(const Problem& p, float* M, i64 rs, i64 cs, i64 lanes, i64 b, i64 j0, i64 cols,
                         LaneAt lane_at) {
  const R scale = Vec::set1(p.dropout_scale);
  const i64 g0 = p.dropout.key0 + j0;  // the tile's first key in the sequence
  alignas(64) std::uint32_t row[W], batch_head[W];
  alignas(64) float kept[8][W];
  for (i64 r0 = 0; r0 < lanes; r0 += W) {
    for (int x = 0; x < W; ++x) {
      const LaneRow lane = lane_at(imin(r0 + x, lanes - 1));  // lanes past the last repeat it
      row[x] = static_cast<std::uint32_t>(p.dropout.row0 + lane.i);
      batch_head[x] = static_cast<std::uint32_t>((p.dropout.batch0 + b) * p.Hq + lane.h);
    }
    const typename Words::Word rows = Words::load(row), heads = Words::load(batch_head);
    for (i64 octet = g0 >> 3; 8 * octet < g0 + cols; ++octet) {
      const DropoutKeep8<Words> k =
          dropout_keep8<Words>(p.dropout_stream, Words::set1(static_cast<std::uint32_t>(octet)), rows, heads);
      const i64 c0 = 8 * octet - g0;  // the tile column of the octet's key 0, in [-7, cols)
      const i64 x_lo = imax(0, -c0), x_hi = imin(8, cols - c0);  // the keys inside the tile
      if (rs == 1) {
        for (i64 x = x_lo; x < x_hi; ++x) Vec::store(M + (c0 + x) * cs + r0, Words::select(k.keep[x], scale));
        continue;
      }
      for (i64 x = x_lo; x < x_hi; ++x) Vec::store(kept[x], Words::select(k.keep[x], scale));
      for (i64 r = 0; r < imin(W, lanes - r0); ++r)
        for (i64 x = x_lo; x < x_hi; ++x) M[(r0 + r) * rs + (c0 + x) * cs] = kept[x][r];
    }
  }
}

// X(r, c) *= M(r, c) over rows × cols (cols a multiple of W): dropout applied to a tile.
inline void mul_tile(float* X, i64 ldx, const float* M, i64 ldm, i64 rows, i64 cols) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; c += W) Vec::store(X + r * ldx + c, Vec::mul(Vec::load(X + r * ldx + c), Vec::load(M + r * ldm + c)));
}

// ---------------------------------------------------------------------------------------
// One step of the online softmax (FlashAttention-2) for the W lanes of a vector: over a
// tile of `count` score vectors score(k), each lane's running max m and running sum l move
// on, each score becomes its unnormalised probability exp(s - m_new), handed to put(k, e),
// and the factor exp(m_old - m_new) is returned, by which the lane's output so far must be
// rescaled. lane_max(x) turns the elementwise max over the tile into each lane's max (the
// identity when an element is a lane; kernel/decode.inl packs several keys of a lane into one
// vector). NaN scores are left out of the max (they stay NaN in P, and so in the output);
// a lane that has seen only -inf is shifted by 0, so its probabilities are exp(-inf) = 0.
template <class Score, class LaneMax, class Put>
inline R online_softmax_step(R& m, R& l, i64 count, Score score, LaneMax lane_max, Put put) {
  const R neg_inf = Vec::set1(kNegInf);
  // Four running maxima: one chain waits out vmaxps's latency at every key, which was a
  // fifth of the bf16 AMX forward's softmax samples at 128 keys a tile (Xeon). The max of
  // the non-NaN scores is the same whichever way they are grouped.
  R chain[4] = {neg_inf, neg_inf, neg_inf, neg_inf};
  i64 k4 = 0;
  for (; k4 + 4 <= count; k4 += 4)
    for (int u = 0; u < 4; ++u) chain[u] = Vec::max_ignore_nan(score(k4 + u), chain[u]);
  for (; k4 < count; ++k4) chain[0] = Vec::max_ignore_nan(score(k4), chain[0]);
  const R tile_max = Vec::max_ignore_nan(Vec::max_ignore_nan(chain[0], chain[1]), Vec::max_ignore_nan(chain[2], chain[3]));
  const R m_new = Vec::max_ignore_nan(lane_max(tile_max), m);
  const R shift = Vec::select_gt(m_new, neg_inf, m_new, Vec::zero());
  R sum = Vec::zero();
  for (i64 k = 0; k < count; ++k) {
    const R e = Vec::exp_nonpositive(Vec::sub(score(k), shift));  // score <= m_new = shift, or NaN
    put(k, e);
    sum = Vec::add(sum, e);
  }
  const R alpha = Vec::exp_nonpositive(Vec::sub(m, shift));  // m <= m_new
  l = Vec::fma(l, alpha, sum);
  m = m_new;
  return alpha;
}

// ---------------------------------------------------------------------------------------
// One worker's scratch block, handed out in 64-byte-aligned pieces. Each loop's buffers
// are carved by one function (a `…Scratch::carve`) that the sizing runs too, on an arena
// without a block: what a worker is given is what that code takes, term by term. With a
// block, taking more than it holds traps instead of writing past it.
struct Arena {
  float* base;   // null: only count
  i64 capacity;  // floats in the block
  i64 used = 0;
  float* take(i64 floats) {
    float* piece = base == nullptr ? nullptr : base + used;
    used += round_up(floats, kPad);
    if (base != nullptr && used > capacity) __builtin_trap();
    return piece;
  }
};
// Floats a layout takes for problem p (the layout's carve(p, arena, args...)) ...
template <class Layout, class... Args>
inline i64 scratch_floats(const Problem& p, Args... args) {
  Arena sizing{nullptr, 0};
  Layout::carve(p, sizing, args...);
  return sizing.used;
}
// ... and the layout carved from a worker's block, by the same call.
template <class Layout, class... Args>
inline Layout carve_scratch(const Problem& p, WorkerScratch scratch, Args... args) {
  Arena arena{scratch.data, scratch.floats};
  return Layout::carve(p, arena, args...);
}

// ---------------------------------------------------------------------------------------
// Forward items. An item's lanes are its query rows flattened over the kv group's query
// heads, so a group's heads share every K and V load (GQA decoding reads K and V once):
//   lane r  ->  flat index it.l0 + r,  head h = g·group + flat / Nq,  row i = flat % Nq.
struct ItemLanes {
  i64 n = 0, np = 0;               // lanes, and lanes padded to kPad
  i64 h[kTileRows], i[kTileRows];  // each lane's query head and row
  i64 i_min = 0, i_max = 0;        // the extreme rows (lanes wrap from one head to the next)
};
inline ItemLanes item_lanes(const Problem& p, const ForwardItem& it) {
  ItemLanes lanes;
  lanes.n = imin(kTileRows, p.group * p.Nq - it.l0), lanes.np = round_up(lanes.n, kPad);
  lanes.i_min = p.Nq, lanes.i_max = 0;
  for (i64 r = 0; r < lanes.n; ++r) {
    const i64 flat = it.l0 + r;
    lanes.h[r] = it.g * p.group + flat / p.Nq, lanes.i[r] = flat % p.Nq;
    lanes.i_min = imin(lanes.i_min, lanes.i[r]), lanes.i_max = imax(lanes.i_max, lanes.i[r]);
  }
  return lanes;
}

// What an item's lanes see (lanes_see), for its loops' tile skips and mask tests.
inline LanesSee item_sees(const Problem& p, i64 b, const ItemLanes& lanes) {
  return lanes_see(p, b, lanes.n, lanes.i_min, lanes.i_max, [&](i64 r) { return LaneRow{lanes.h[r], lanes.i[r]}; });
}
// ... and what query rows [i0, i0 + br) of head h see (the backward's query tiles).
inline LanesSee rows_see(const Problem& p, i64 b, i64 h, i64 i0, i64 br) {
  return lanes_see(p, b, br, i0, i0 + br - 1, [&](i64 r) { return LaneRow{h, i0 + r}; });
}

// Items with at most kFewLanes lanes (fast.hpp) take a loop of their own: the tile GEMMs
// would leave most vector lanes idle (forward_few_lanes; on AVX2 and AVX-512, kernel/decode.inl).
// Keys per tile on those loops: K and V are consumed a few KiB at a time, so the rows
// prefetched ahead are still in L2 when the tile reaches them.
constexpr i64 kFewTileCols = 32;
// ... and how far ahead their K and V rows are prefetched into L2. The hardware prefetchers
// stop at 4 KiB pages, which hold only 8 rows of a D = 128 head. Measured on the suite's
// decoding shape: 1.1-1.3x from memory (docs/performance.md, "Decoding").
constexpr i64 kFewPrefetchKeys = 64;

// Writes lane r of an item (query head h, row i) from its running max m, sum l and
// unnormalised output row O: out and lse, or the split's partial results. A sink joins the
// sum here, once per row, as one more term exp(sink − top) with no value (a split's partial
// leaves it to the merge, api.cpp).
inline void finish_row(const Problem& p, const Tensors& t, const ForwardItem& it, i64 b, i64 h, i64 i, i64 r, float m,
                       float l, const float* O) {
  const i64 Dv = p.Dv;
  const float sink = p.has_sinks && it.part_out == nullptr ? p.sinks.data[h * p.sinks.stride[0]] : kNegInf;
  const bool empty_row = l == 0.0f;
  float inv = empty_row ? 0.0f : 1.0f / l;
  const float shift = m == kNegInf ? 0.0f : m;
  float lse = empty_row ? kNegInf : shift + __builtin_logf(l);
  if (sink != kNegInf) {  // total = l·e^(m − top) + e^(sink − top), top = max(m, sink): no overflow either way
    const float top = m > sink ? m : sink;
    const float kept = empty_row ? 0.0f : __builtin_expf(m - top);
    const float total = l * kept + __builtin_expf(sink - top);
    inv = kept / total;
    lse = top + __builtin_logf(total);  // an empty row: the sink's own logit, and out 0
  }
  if (it.part_out != nullptr) {  // split-KV: this split's normalised output and lse
    float* po = it.part_out + (it.l0 + r) * Dv;
    for (i64 e = 0; e < Dv; ++e) po[e] = empty_row ? 0.0f : O[e] * inv;
    it.part_lse[it.l0 + r] = lse;
    return;
  }
  if (t.out_w.dtype == Dtype::f32) {
    for (i64 e = 0; e < Dv; ++e) t.out_w.data[off(t.out_w, b, h, i, e)] = empty_row ? 0.0f : O[e] * inv;
  } else {  // normalised in chunks, each rounded once on store
    constexpr i64 kChunk = 64;
    float chunk[kChunk];
    for (i64 e0 = 0; e0 < Dv; e0 += kChunk) {
      const i64 n = imin(kChunk, Dv - e0);
      for (i64 e = 0; e < n; ++e) chunk[e] = empty_row ? 0.0f : O[e0 + e] * inv;
      store_row(t.out_w, off(t.out_w, b, h, i, e0), n, chunk);
    }
  }
  if (t.lse_w.data != nullptr) t.lse_w.data[off(t.lse_w, b, h, i)] = lse;
}
