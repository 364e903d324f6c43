// forward.inl — the one place that picks an item's forward loop, and the scratch it needs.

template <Engine16 E>
ForwardLoop forward_item_on(const Problem& p, const Tensors& t, const ForwardItem& it, WorkerScratch scratch);

// Head x of an item of several kv heads (ForwardItem::heads): its own item.
inline ForwardItem head_item(const Problem& p, const ForwardItem& it, i64 x) {
  ForwardItem one = it;
  one.g = it.g + x, one.heads = 1;
  const i64 lanes = p.group * p.Nq;
  if (it.part_out != nullptr) one.part_out = it.part_out + x * lanes * p.Dv, one.part_lse = it.part_lse + x * lanes;
  return one;
}

// An item of several kv heads: the decoding loop takes their passes tile by tile (decode::heads_item);
// the other loops take the heads one after the other.
template <Engine16 E>
ForwardLoop forward_heads_on(const Problem& p, const Tensors& t, const ForwardItem& it, WorkerScratch scratch) {
  if (it.heads < 1 || it.heads > kMaxItemHeads || it.g + it.heads > p.Hkv) __builtin_trap();
  ForwardItem its[kMaxItemHeads];
  for (i64 x = 0; x < it.heads; ++x) its[x] = head_item(p, it, x);
#ifdef SDPA_FUSED_DECODE
  ItemLanes lanes[kMaxItemHeads];
  for (i64 x = 0; x < it.heads; ++x) lanes[x] = item_lanes(p, its[x]);
  if (decode::applies(p, t, lanes[0].n)) {
    decode::forward(p, t, its, lanes, it.heads, scratch);
    return ForwardLoop::decoding;
  }
#endif
  ForwardLoop loop = ForwardLoop::tiled;
  for (i64 x = 0; x < it.heads; ++x) loop = forward_item_on<E>(p, t, its[x], scratch);
  return loop;
}

// The forward of one item, by the loop that suits it; the one place that chooses. E: the
// engine of the table's 16-bit products; the items of the dtypes it takes that are neither
// decoding nor few-lane go to forward_tiled_engine16 on it (the AVX-512 path's AMX and dot
// tables, table_on<E>).
template <Engine16 E>
ForwardLoop forward_item_on(const Problem& p, const Tensors& t, const ForwardItem& it, WorkerScratch scratch) {
  if (it.heads != 1) return forward_heads_on<E>(p, t, it, scratch);
  const ItemLanes lanes = item_lanes(p, it);
#ifdef SDPA_FUSED_DECODE
  if (decode::applies(p, t, lanes.n)) {
    decode::forward(p, t, &it, &lanes, 1, scratch);
    return ForwardLoop::decoding;
  }
#endif
  // A paged or quantized cache's rows the decoding loop does not take (more lanes than it holds,
  // blocks of other sizes, the scalar build): the tiled loop, which maps pages and widens codes
  // (pack_cache_rows), or for a paged 16-bit cache's rows of a dtype the engine takes, and bf16
  // queries over 8-bit codes, the engine loop, which maps pages and widens codes too
  // (kv_bf16_rows), as the same rows contiguous would run. fp16 queries over codes stay on the
  // tiled loop: the engine would split them into bf16 hi + lo, and the codes with them.
  if (cache_rows(t)) {
#ifdef SDPA_ENGINE16
    const bool engine_reads = t.codes.kind == KvCodes::Kind::none || p.dtype == Dtype::bf16;
    if (engine_reads && engine_takes(E, p.dtype)) {
      forward_tiled_engine16<E>(p, t, it, lanes, scratch);
      return ForwardLoop::engine;
    }
#endif
    forward_tiled(p, t, it, lanes, scratch);
    return ForwardLoop::tiled;
  }
  if (lanes.n <= kFewLanes && t.k.stride[3] == 1) {
    forward_few_lanes(p, t, it, lanes, scratch);
    return ForwardLoop::few_lanes;
  }
#ifdef SDPA_ENGINE16
  if (engine_takes(E, p.dtype)) {
    forward_tiled_engine16<E>(p, t, it, lanes, scratch);
    return ForwardLoop::engine;
  }
#endif
  forward_tiled(p, t, it, lanes, scratch);
  return ForwardLoop::tiled;
}
ForwardLoop forward_item(const Problem& p, const Tensors& t, const ForwardItem& it, WorkerScratch scratch) {
  return forward_item_on<Engine16::widened>(p, t, it, scratch);
}

// Floats per worker: the largest of the layouts forward_item may carve, its items of up to `heads`
// kv heads (the decoding loop's buffers per head; the other loops take one head at a time).
i64 forward_scratch(const Problem& p, i64 heads) {
  i64 floats = imax(scratch_floats<TiledForwardScratch>(p), scratch_floats<FewLaneForwardScratch>(p));
#ifdef SDPA_FUSED_DECODE
  floats = imax(floats, scratch_floats<decode::Scratch>(p, kFewLanes, kFewLanes, heads));
#else
  (void)heads;
#endif
  return floats;
}
#ifdef SDPA_ENGINE16
template <Engine16 E>
i64 forward_scratch_on(const Problem& p, i64 heads) {  // the engine's layout only where forward_item_on<E> may take it
  return engine_takes(E, p.dtype) ? imax(forward_scratch(p, heads), scratch_floats<Engine16ForwardScratch>(p))
                                  : forward_scratch(p, heads);
}
#endif
