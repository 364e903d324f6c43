// forward_engine16.inl — the forward's tile loop with both products on a 16-bit engine
// (AMX-BF16 tiles, vdpbf16ps or BFDOT: engine16.hpp). Included only where the ISA has an
// engine (SDPA_ENGINE16: the AVX-512 path, and the neon path for BFDOT).

// The tiled forward with both products on a 16-bit engine (engine16.hpp: AMX-BF16 tiles or
// vdpbf16ps), for the dtypes the engine takes: the
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
// bf16 queries over a quantized cache's codes run here too: the codes widened to bf16 are their
// values exactly (kv_bf16_rows), and the rows' scales, one per key, multiply the scores after Sᵀ
// (K's) and the probabilities before they are rounded for Oᵀ (V's), as the decoding loop applies
// them: s_j = β·k_scale_j·(q·codes_j), o = Σ_j bf16(p_j·v_scale_j)·codes_j. A tile with a
// non-finite V scale takes the fp32 P·V, which reads code × scale (pack_cache_rows).
// Keys per tile of the engine forward: twice forward_tiled's. Oᵀ += Vᵀ·Pᵀ then sums 128 keys
// per load and store of Oᵀ's tiles, whose K of 64 left the tile unit waiting on them (a
// 64 × 64 × 64 product with C loaded runs at 25 % of the tile peak, 33 % at K = 128, on one
// Xeon thread); the softmax's tile, 128 × 64 floats, still fits in L1 beside the rest.
constexpr i64 kEngineKeys = 2 * kTileCols;
// fp16 runs the same loop on bf16 tiles, each operand split into hi + lo (Engine16Pack::terms):
// its contraction dimensions (Dk for Sᵀ, the keys for Oᵀ) are 3× as long.
struct Engine16ForwardScratch {
  std::uint32_t* QT;  // (terms·dk32/2, np)  Qᵀ in pairs: (Q[r][2k], Q[r][2k+1]) at [k][r]
  bf16* K_rows;       // (bc16, terms·dk32)  K rows, when not read in place (fp16: always, split)
  float* ST;          // (bc16, np)    scores, then probabilities
  std::uint32_t* PT;  // (terms·kEngineKeys/2, np)  Pᵀ in pairs
  bf16* VT;           // (dvp, terms·kEngineKeys)   Vᵀ, when not packed for the call
  bf16* VT16;         // (dvp, kTileCols)  fp16: Vᵀ before its split
  float* OT;          // (dvp, np)     Oᵀ, unnormalised
  bf16* rows16;       // (kEngineKeys, max(Dk, Dv))  the lanes' Q rows; K or V rows gathered, when not unit stride
  float* V_rows;      // (bc, dvp)     V widened, for a key tile with non-finite V
  float* QTf;         // (Dk, np)      fp16: Qᵀ widened, for Sᵀ of a tile with non-finite K or Q
  float* K_rows_f;    // (bc, dkp)     fp16: K widened, likewise
  float* drop;        // (bc, np)      dropout multipliers, with dropout
  OnlineRows rows;
  static Engine16ForwardScratch carve(const Problem& p, Arena& arena) {
    const i64 dk32 = round_up(p.Dk, 32), dvp = round_up(p.Dv, kPad), terms = Engine16Pack(p).terms;
    const auto halves = [&](i64 n) { return arena.take((n + 1) / 2); };  // n 16-bit values
    Engine16ForwardScratch s;
    s.QT = reinterpret_cast<std::uint32_t*>(arena.take(terms * dk32 / 2 * kTileRows));
    s.K_rows = reinterpret_cast<bf16*>(halves(kEngineKeys * terms * dk32));
    s.ST = arena.take(kEngineKeys * kTileRows);
    s.PT = reinterpret_cast<std::uint32_t*>(arena.take(terms * kEngineKeys / 2 * kTileRows));
    s.VT = reinterpret_cast<bf16*>(halves(dvp * terms * kEngineKeys));
    s.VT16 = reinterpret_cast<bf16*>(halves(terms > 1 ? dvp * kTileCols : 0));
    s.OT = arena.take(dvp * kTileRows);
    s.rows16 = reinterpret_cast<bf16*>(halves(kEngineKeys * imax(p.Dk, p.Dv)));
    s.V_rows = arena.take(kEngineKeys * dvp);
    s.QTf = arena.take(terms > 1 ? p.Dk * kTileRows : 0);
    s.K_rows_f = arena.take(terms > 1 ? kEngineKeys * round_up(p.Dk, kPad) : 0);
    s.drop = arena.take(p.has_dropout ? kEngineKeys * kTileRows : 0);
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
  const Bf16Rows v_rows = kv_bf16_rows(t, /*key=*/false, b, g, j0, bc, p.Dv, rows16);
  if (p.dtype != Dtype::fp16) return engine16::pack_transposed_rows(v_rows.data, v_rows.ld, bc, p.Dv, kp, out, ld);
  const i64 dvp = round_up(p.Dv, kPad);
  const bool finite = engine16::pack_transposed_rows(v_rows.data, v_rows.ld, bc, p.Dv, kp, VT16, kTileCols, 0x7C00);
  engine16::split_rows_fp16(reinterpret_cast<const fp16*>(VT16), kTileCols, dvp, kp, dvp, kp, out, ld);
  return finite;
}
// The whole call's Vᵀ (Tensors::v_packed), for bf16 and fp16: per (b, g) dvp rows of the
// keys rounded up to 32 (fp16: 3× that, split), the row stride an odd number of 64-byte
// lines (a tile's 16 rows then fall in 16 L1 sets, not one: at Nk = 4096 the bare stride is
// 8 KiB).
// Scratch per worker: rows16 (kTileCols × Dv) and VT16 (dvp × kTileCols), as pack_vt_tile takes them.
// fp16's K split into (hi, hi, lo) chunks (Tensors::k_packed): the A operand of Sᵀ = K·Qᵀ as
// forward_tiled_engine16 splits it per key tile, rows of terms·dk32 (its row stride there too),
// round_up(Nk, 16) rows per (b, g), zero past Nk; an 8-bit cache's K under bf16 queries
// likewise, its codes' values widened to bf16 once for the call instead of once per lane tile.
// bf16's K is read in place. Scratch: rows16 (kTileCols × Dk), for rows that are not unit stride.
// Packed once per call from two items a head for bf16, from kSplitMinItems for fp16: its split
// triples the bytes every item then reads back (K's and V's three terms), where an item that
// splits its own tiles reads the fp16 rows once. A driver switching the two call by call (Xeon,
// 2 threads, 32 heads over 8, D 128): 4 items 1.22-1.42× faster per tile (1024 and 4096 keys),
// 8 items 1.01-1.08×, 16 items 0.90-1.00×; bf16's pack was within 2 % of per tile at 4 items
// and 10-15 % ahead from 8.
constexpr i64 kSplitMinItems = 16;
template <Engine16 E>
PackLayout forward_pack_layout_on(const Problem& p, const Tensors& t, PackedOperand which) {
  const bool codes = t.codes.kind != KvCodes::Kind::none;
  if (!engine_takes(E, p.dtype) || (codes && p.dtype != Dtype::bf16)) return {};  // forward_item's engine_reads
  const i64 terms = Engine16Pack(p).terms, min_items = terms > 1 ? kSplitMinItems : PackLayout{}.min_items;
  if (which == PackedOperand::k) {
    if (terms == 1 && !codes) return {};  // bf16 keys are read in place
    const i64 ld = terms * round_up(p.Dk, 32);
    return {ld, round_up(p.Nk, 16) * ld, kTileCols * p.Dk, min_items};
  }
  const i64 lines = terms * round_up(p.Nk, 32) / 32, ld = (lines % 2 == 0 ? lines + 1 : lines) * 32;
  const i64 dvp = round_up(p.Dv, kPad);
  return {ld, dvp * ld, kTileCols * p.Dv + dvp * kTileCols, min_items};
}
// Key tile [j0, j0 + kTileCols) of fp16's K split into (hi, hi, lo) chunks, into k_rows (its
// first row, row stride ld); whether its values are all finite.
inline bool split_k_tile(const Problem& p, const Tensors& t, i64 b, i64 g, i64 j0, bf16* k_rows, i64 ld, bf16* rows16) {
  const i64 bc = imin(kTileCols, p.Nk - j0);
  const Bf16Rows x = kv_bf16_rows(t, /*key=*/true, b, g, j0, bc, p.Dk, rows16);
  return engine16::split_rows_fp16(reinterpret_cast<const fp16*>(x.data), x.ld, bc, p.Dk, round_up(bc, 16),
                              round_up(p.Dk, 32), k_rows, ld);
}
// Key tile [j0, j0 + kTileCols) of an 8-bit cache's K as bf16 code values (exact; the scales
// apart, as forward_tiled_engine16 applies them), widened straight into k_rows (row stride ld) and
// zero-padded to whole 16-row, 32-element blocks as its per-tile copy pads them (widening into a row
// buffer first and copying it over cost a second pass: the int8 chunk's time over the bf16 cache's,
// 64 bf16 queries over 4096 keys, 32 / 8 heads of 128, went 1.055 → 1.029 on Zen 4).
// Finite: every code's value is (the per-tile path reads them so too).
inline bool codes_k_tile(const Problem& p, const Tensors& t, i64 b, i64 g, i64 j0, bf16* k_rows, i64 ld) {
  const i64 bc = imin(kTileCols, p.Nk - j0), bc16 = round_up(bc, 16), Dk = p.Dk, dk32 = round_up(Dk, 32);
  widen_code_rows(t, /*key=*/true, b, g, j0, bc, Dk, k_rows, ld);
  for (i64 c = 0; c < bc16; ++c) {  // the padding: past Dk, and whole rows past bc
    const i64 d0 = c < bc ? Dk : 0;
    __builtin_memset(k_rows + c * ld + d0, 0, static_cast<std::size_t>(dk32 - d0) * sizeof(bf16));
  }
  return true;
}
bool forward_pack_tile_engine16(const Problem& p, const Tensors& t, PackedOperand which, i64 b, i64 g, i64 j0, void* head,
                           i64 ld, void* scratch) {
  bf16* rows16 = static_cast<bf16*>(scratch);
  bf16* const k_rows = static_cast<bf16*>(head) + j0 * ld;
  if (which == PackedOperand::k && t.codes.kind != KvCodes::Kind::none) return codes_k_tile(p, t, b, g, j0, k_rows, ld);
  if (which == PackedOperand::k) return split_k_tile(p, t, b, g, j0, k_rows, ld, rows16);
  return pack_vt_tile(p, t, b, g, j0, static_cast<bf16*>(head) + Engine16Pack(p).terms * j0, ld, rows16,
                      rows16 + kTileCols * p.Dv);
}
// Whether key tiles [j0, j0 + bc) of head `head` are all finite, by a packed operand's flags.
inline bool packed_tiles_finite(const Packed16& x, i64 head, i64 j0, i64 bc) {
  bool finite = true;
  for (i64 j = j0; j < j0 + bc; j += kTileCols) finite &= x.finite[head * x.tiles + j / kTileCols] != 0;
  return finite;
}

template <Engine16 E>
void forward_tiled_engine16(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes,
                       WorkerScratch scratch) {
  const i64 b = it.b, g = it.g, Dk = p.Dk, Dv = p.Dv, dvp = round_up(Dv, kPad), n = lanes.n, np = lanes.np;
  const i64 dk32 = round_up(Dk, 32), terms = Engine16Pack(p).terms;
  const bool split = terms > 1;
  const bool codes = t.codes.kind != KvCodes::Kind::none;  // bf16 queries over an 8-bit cache
  if (codes && split) __builtin_trap();                    // (engine_reads: never fp16's split)
  alignas(64) float row_scales[kEngineKeys];               // a quantized tile's K or V scales
  bool qt_widened = false;  // s.QTf holds the item's Qᵀ (fp16's widened Sᵀ, built once)
  const auto s = carve_scratch<Engine16ForwardScratch>(p, scratch);
  // Rows [0, bc) of the tile in ST (np lanes each) times row_scales.
  const auto scale_tile_rows = [&](i64 bc) {
    for (i64 c = 0; c < bc; ++c) {
      const R x = Vec::set1(row_scales[c]);
      for (i64 r = 0; r < np; r += W) Vec::store(s.ST + c * np + r, Vec::mul(Vec::load(s.ST + c * np + r), x));
    }
  };
  // Qᵀ in pairs (fp16: split into (hi, lo, hi) chunks), lanes and Dk zero-padded: the
  // lanes' rows gathered into rows16 (n × Dk 16-bit values), then packed by the vector
  // packers. A scalar split of every element here was a fifth of the fp16 forward at
  // N = 1024 (one thread, Xeon).
  const std::uint16_t* q_bits = static_cast<const std::uint16_t*>(t.q.bits);
  std::uint16_t* q_rows = reinterpret_cast<std::uint16_t*>(s.rows16);
  std::uint16_t q_special = 0;  // fp16: an inf or NaN among the queries: every Sᵀ widened (see engine16::split_rows_fp16)
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
    engine16::pack_pairs_transposed_split(reinterpret_cast<const fp16*>(q_rows), Dk, n, Dk, np, s.QT, np,
                                     SplitOrder::hi_lo_hi);
  else
    engine16::pack_pairs_transposed(s.rows16, Dk, n, Dk, np, s.QT, np);
  s.rows.start(lanes, dvp);
  for (i64 x = 0; x < dvp * np; ++x) s.OT[x] = 0.0f;
  const LanesSee see = item_sees(p, b, lanes);
  const KeyRange keys = visible_keys(see, it.j_begin, it.j_end);
  const AmxTiles tiles(E == Engine16::amx);
  // Key tiles of kEngineKeys from a multiple of kTileCols (a split's keys start at one), never
  // past the item's last key; a tile that a mask cuts (the causal diagonal, a window's
  // edges) is kTileCols keys, so less of what the mask hides is computed (causal N = 1024,
  // D = 64: 128-key tiles there were 18 % slower).
  i64 bc = 0;
  for (i64 j0 = keys.first / kTileCols * kTileCols; j0 <= keys.last; j0 += bc) {
    bc = imin(kEngineKeys, it.j_end - j0);
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
      K = bf16_tile_rows(kv_bf16_rows(t, /*key=*/true, b, g, j0, bc, Dk, s.rows16), bc, Dk, bc16, dk32, s.K_rows);
    }
    if (k_finite && q_finite) {
      engine_gemm<E>(bc16, np, terms * dk32, K.data, K.ld, s.QT, np, s.ST, np, /*accumulate=*/false);
      if (codes) {
        cache_scales(t, /*key=*/true, b, g, j0, bc, row_scales);
        scale_tile_rows(bc);
      }
    } else {  // fp16 with an inf or NaN in K or Q: Sᵀ widened, as forward_tiled computes it
      for (i64 r = 0; r < np && !qt_widened; ++r)
        if (r < n)
          load_row(t.q, off(t.q, b, lanes.h[r], lanes.i[r], 0), Dk, s.QTf + r, np);
        else
          for (i64 d = 0; d < Dk; ++d) s.QTf[d * np + r] = 0.0f;
      qt_widened = true;
      const AOperand Kf = a_rows(kv_rows_operand(t, /*key=*/true, b, g, j0, bc, Dk, s.K_rows_f, /*scan_in_place=*/false));
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
    i64 ldvt = terms * kEngineKeys;
    bool v_finite = true;
    if (t.v_packed.data != nullptr) {
      VT = static_cast<const bf16*>(t.v_packed.data) + head * t.v_packed.per_head + terms * j0, ldvt = t.v_packed.ld;
      v_finite = packed_tiles_finite(t.v_packed, head, j0, bc);
    } else {
      for (i64 j = j0; j < j0 + bc; j += kTileCols)
        v_finite &= pack_vt_tile(p, t, b, g, j, s.VT + terms * (j - j0), ldvt, s.rows16, s.VT16);
    }
    if (codes) {
      cache_scales(t, /*key=*/false, b, g, j0, bc, row_scales);
      for (i64 c = 0; c < bc; ++c) v_finite &= is_finite(row_scales[c]);
    }
    if (v_finite) {
      if (codes) scale_tile_rows(bc);  // P's rows times their V scales, before bf16 rounds them
      if (split)
        engine16::pack_rows_in_pairs_f32_split(s.ST, np, bc, kp, np, s.PT, np);
      else
        engine16::pack_rows_in_pairs_f32(s.ST, np, bc, kp, np, s.PT, np);
      engine_gemm<E>(dvp, np, terms * kp, VT, ldvt, s.PT, np, s.OT, np, /*accumulate=*/true);
    } else {  // Oᵀ[e] += v_ce · Pᵀ[c], each product kept only where P is not 0
      const RowsOperand V = kv_rows_operand(t, /*key=*/false, b, g, j0, bc, Dv, s.V_rows, /*scan_in_place=*/true);
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
  engine16::transpose_f32(s.OT, np, dvp, np, s.rows.O, dvp);
  s.rows.finish(p, t, it, lanes, dvp);
}
