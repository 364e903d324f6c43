// table.inl — the vector math the tests reach, and the kernel tables (fast.hpp's FastKernels)
// this ISA's unit hands out: widened, and one per 16-bit engine where the ISA has them.

void exp_n(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) Vec::store(y + i, Vec::exp(Vec::load(x + i)));
}
void tanh_n(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) Vec::store(y + i, Vec::tanh(Vec::load(x + i)));
}

PackLayout no_pack(const Problem&, const Tensors&, PackedOperand) { return {}; }

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
                             nullptr,
#ifdef SDPA_FUSED_DECODE
                             kFewLanes};
#else
                             0};
#endif
  return k;
}
#ifdef SDPA_ENGINE16
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
    on.forward_pack_tile = forward_pack_tile_engine16;
    return on;
  }();
  return k;
}
#endif
