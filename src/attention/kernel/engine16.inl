// engine16.inl — what the 16-bit engines' loops share (the forward's and the backward's):
// bf16 operand rows, the split's term count, the engine's GEMM and the tile configuration.
// Compiled on every path; called on the engine tables only (table_on<E>: AVX-512's, neon's).

// The 16-bit engines' operands (forward_tiled_engine16, the engine backward; compiled on every
// path, called on the engine tables only): rows [j0, j0 + n) of
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
// Rows [j0, j0 + n) of a quantized cache's K (key) or V (Tensors::codes) as their codes' values in
// bf16 (widen_codes_bf16: exact), D elements each, into out (row stride ldo); the scales are left to
// the loop (cache_scales).
inline void widen_code_rows(const Tensors& t, bool key, i64 b, i64 g, i64 j0, i64 n, i64 D, bf16* out, i64 ldo) {
  const auto* codes = static_cast<const std::uint8_t*>((key ? t.k : t.v).bits);
  for (i64 c = 0; c < n; ++c)
    widen_codes_bf16(t.codes.kind, codes + cache_row(t, key, b, g, j0 + c).at, D, out + c * ldo);
}
// ... and of a KV cache's K (key) or V: a paged cache's rows (Tensors::pages) found through the
// block table, in place where the n rows lie in one block, else gathered into buf (row stride D),
// so the engine loop reads a paged cache's blocks where they lie, as the tiled loop does. A
// quantized cache's rows (Tensors::codes) are its codes widened into buf (widen_code_rows).
inline Bf16Rows kv_bf16_rows(const Tensors& t, bool key, i64 b, i64 g, i64 j0, i64 n, i64 D, bf16* buf) {
  const InView& x = key ? t.k : t.v;
  if (t.codes.kind != KvCodes::Kind::none) {
    widen_code_rows(t, key, b, g, j0, n, D, buf, D);
    return {buf, D};
  }
  if (t.pages.table == nullptr) return bf16_rows(x, b, g, j0, n, D, buf);
  const bf16* bits = static_cast<const bf16*>(x.bits);  // a cache's head dimension is contiguous (kvcache.cpp)
  if (j0 / t.pages.rows == (j0 + n - 1) / t.pages.rows) return {bits + cache_row(t, key, b, g, j0).at, x.stride[2]};
  for (i64 c = 0; c < n; ++c)  // (an element loop here stayed scalar: 16-bit stores, 80 % of a bf16 chunk's time)
    __builtin_memcpy(buf + c * D, bits + cache_row(t, key, b, g, j0 + c).at,
                     static_cast<std::size_t>(D) * sizeof(bf16));
  return {buf, D};
}
// ... and as an A operand of whole tiles: n rows × D in place when they fill rows16 × d32
// (n, D multiples of 16 and 32) and in_place allows it, else copied with zero padding into
// buf (row stride d32).
inline Bf16Rows bf16_tile_rows(const Bf16Rows& x, i64 n, i64 D, i64 rows16, i64 d32, bf16* buf,
                               bool in_place = true) {
  if (in_place && n == rows16 && D == d32) return x;
  engine16::copy_rows_padded(x.data, x.ld, n, D, rows16, d32, buf, d32);
  return {buf, d32};
}
// The backward's engine packings, for bf16 or for fp16 split into bf16 hi + lo (engine16.hpp,
// kSplitTerms): one choice per kind of operand, and `terms`, by which the split lengthens
// every contraction. Rows are 16-bit values either way (Bf16Rows moves bits). `order`: the
// split's blocks (engine16::SplitOrder), by default an A operand's hi_hi_lo and a B's hi_lo_hi;
// pass B gives Q and dout (B there) and K and V (A) the orders kv_tiles gives them, so S
// and dP, and so dQ, keep the one pass's bits.
using engine16::SplitOrder;
struct Engine16Pack {
  bool split = false;
  i64 terms = 1;
  explicit Engine16Pack(const Problem& p) : split(p.dtype == Dtype::fp16), terms(split ? engine16::kSplitTerms : 1) {}
  static const fp16* half(const Bf16Rows& x) { return reinterpret_cast<const fp16*>(x.data); }
  void pairs_transposed(const Bf16Rows& x, i64 n, i64 D, i64 cols, std::uint32_t* out, i64 ldo,
                        SplitOrder order = SplitOrder::hi_lo_hi) const {
    if (split)
      engine16::pack_pairs_transposed_split(half(x), x.ld, n, D, cols, out, ldo, order);
    else
      engine16::pack_pairs_transposed(x.data, x.ld, n, D, cols, out, ldo);
  }
  bool rows_in_pairs(const Bf16Rows& x, i64 n, i64 D, i64 kp, std::uint32_t* out, i64 ldo) const {
    return split ? engine16::pack_rows_in_pairs_split(half(x), x.ld, n, D, kp, out, ldo)
                 : engine16::pack_rows_in_pairs(x.data, x.ld, n, D, kp, out, ldo);
  }
  void transposed(const float* ST, i64 rows, i64 bc, i64 kp, bf16* out, i64 ldo) const {
    if (split)
      engine16::pack_transposed_bf16_split(ST, rows, bc, kp, out, ldo);
    else
      engine16::pack_transposed_bf16(ST, rows, bc, kp, out, ldo);
  }
  void round_rows(const float* X, i64 ldx, i64 n, i64 D, i64 rows, i64 cols, bf16* out, i64 ldo) const {
    if (split)
      engine16::round_rows_bf16_split(X, ldx, n, D, rows, cols, out, ldo);
    else
      engine16::round_rows_bf16(X, ldx, n, D, rows, cols, out, ldo);
  }
  // n rows × D as an A operand of whole tiles (rows16 × terms·d32, into buf unless bf16 rows
  // fill them in place).
  Bf16Rows tile_rows(const Bf16Rows& x, i64 n, i64 D, i64 rows16, i64 d32, bf16* buf, bool in_place = true,
                     SplitOrder order = SplitOrder::hi_hi_lo) const {
    if (!split) return bf16_tile_rows(x, n, D, rows16, d32, buf, in_place);
    engine16::split_rows_fp16(half(x), x.ld, n, D, rows16, d32, buf, terms * d32, order);
    return {buf, terms * d32};
  }
};

// The engine's product, C (+)= A·B in engine16::amx::gemm's layouts (engine16.hpp): on tiles, or by vdpbf16ps.
template <Engine16 E>
inline void engine_gemm(i64 M, i64 N, i64 K, const bf16* A, i64 lda, const std::uint32_t* B, i64 ldb, float* C, i64 ldc,
                        bool accumulate) {
  if constexpr (E == Engine16::dot)
    engine16::dot::gemm(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  else
    engine16::amx::gemm(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

// Tile configuration for the span of one item (engine16::amx::configure, engine16::amx::release), where `on`.
class AmxTiles {
 public:
  explicit AmxTiles(bool on) : on_(on) {
    if (on_) engine16::amx::configure();
  }
  ~AmxTiles() {
    if (on_) engine16::amx::release();
  }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

 private:
  bool on_;
};
