// operands.inl — the scores' scale and soft-cap, and how the tile loops read their operands:
// rows in place where the strides allow, else packed or gathered into scratch.

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

// Whether the call's K and V are a KV cache's rows that only a cache-aware load may read: in a
// paged cache's blocks (Tensors::pages) or as a quantized cache's bytes (Tensors::codes).
inline bool cache_rows(const Tensors& t) { return t.pages.table != nullptr || t.codes.kind != KvCodes::Kind::none; }

// n codes from bytes (unit stride) times scale into dst, by vectors: int8 converted directly;
// an e4m3 byte placed into an fp16's bits (sign at bit 15, exponent and mantissa at bits 13-7:
// the value × 2^-8, subnormals included) and widened by this ISA's fp16 converter, the 2^8
// folded into the scale. Exact (the scale's factor a power of two): code_value's values.
inline void widen_codes(KvCodes::Kind kind, const std::uint8_t* bytes, i64 n, float scale, float* dst) {
  if (kind == KvCodes::Kind::int8) {
    for (i64 d = 0; d < n; ++d) dst[d] = static_cast<float>(static_cast<std::int8_t>(bytes[d])) * scale;
    return;
  }
  constexpr i64 kChunk = 64;
  fp16 half[kChunk];
  const float unit_scale = scale * 256.0f;
  for (i64 d0 = 0; d0 < n; d0 += kChunk) {
    const i64 m = imin(kChunk, n - d0);
    for (i64 d = 0; d < m; ++d) {
      const unsigned b = bytes[d0 + d];
      half[d].bits = static_cast<std::uint16_t>(((b & 0x80u) << 8) | ((b & 0x7Fu) << 7));
    }
    converters().fp16_to_float(half, dst + d0, m);
    for (i64 d = 0; d < m; ++d) dst[d0 + d] *= unit_scale;
  }
}

// The same as bf16 values, each the code's value (no scale): exact, since an int8 code has at most 7
// significant bits and an e4m3 one 4, in bf16's range. The 16-bit engine's products read them so
// (kv_bf16_rows) and take the scales apart (cache_scales). int8: one pass of integer operations the
// compiler vectorises (each code through its float's high half). e4m3: the decoding loop's own
// widening (decode::Ops::load: ~4 operations a vector, subnormals and the never-written NaN bytes
// read as every loop reads them) into a float chunk, then its high halves; a one-pass select by
// masks between the rebiased exponent and a subnormal's float (~15 operations a vector, kept where
// there is no Ops: the scalar build, which has no engine) ran the engine's fp8 chunks 16-18 % over
// its int8 ones, the two loads 0-3 % (Zen 4; docs/performance.md,
// "Chunked prefill over an 8-bit KV cache").
inline void widen_codes_bf16(KvCodes::Kind kind, const std::uint8_t* bytes, i64 n, bf16* dst) {
  if (kind == KvCodes::Kind::int8) {
    for (i64 d = 0; d < n; ++d) {
      const float x = static_cast<float>(static_cast<std::int8_t>(bytes[d]));
      dst[d].bits = static_cast<std::uint16_t>(__builtin_bit_cast(std::uint32_t, x) >> 16);
    }
    return;
  }
#ifdef SDPA_FUSED_DECODE
  // e4m3 as the decoding loop reads it (decode::Ops: the byte in an fp16's bits, widened by the
  // ISA's fp16 conversion: value × 2^-8, exact, subnormals included), × 256 (exact), into a float
  // chunk whose high halves are the bf16 values (4 significant bits: exact).
  constexpr i64 kChunk = 64;
  static_assert(kChunk % W == 0);
  float buf[kChunk];
  const R unit = Vec::set1(256.0f);
  for (i64 d0 = 0; d0 < n; d0 += kChunk) {
    const i64 m = imin(kChunk, n - d0);
    const auto* codes = reinterpret_cast<const E4M3Code*>(bytes + d0);
    i64 d = 0;
    for (; d + W <= m; d += W) Vec::store(buf + d, Vec::mul(decode::Ops::load(codes + d), unit));
    for (; d < m; ++d) buf[d] = decode::Ops::to_float(codes[d]) * 256.0f;
    for (d = 0; d < m; ++d)
      dst[d0 + d].bits = static_cast<std::uint16_t>(__builtin_bit_cast(std::uint32_t, buf[d]) >> 16);
  }
#else
  for (i64 d = 0; d < n; ++d) {  // a select by masks, not ?: (which GCC 12 leaves unvectorised)
    const std::uint32_t b = bytes[d], e = (b >> 3) & 0xFu, m = b & 7u;
    const std::uint32_t normal = ((e + 120u) << 7) | (m << 4);
    const std::uint32_t subnormal =
        __builtin_bit_cast(std::uint32_t, static_cast<float>(static_cast<std::int32_t>(m)) * 0x1p-9f) >> 16;
    const std::uint32_t is_normal = 0u - static_cast<std::uint32_t>(e != 0);
    dst[d].bits = static_cast<std::uint16_t>(((b & 0x80u) << 8) | (normal & is_normal) | (subnormal & ~is_normal));
  }
#endif
}

// Row j of kv head (b, g) of a cache's K (key) or V: the element offset of its first value, and
// the index of its scale (a quantized cache's), found through the block table where paged.
struct CacheRow {
  i64 at, scale_at;
};
inline CacheRow cache_row(const Tensors& t, bool key, i64 b, i64 g, i64 j) {
  const InView& x = key ? t.k : t.v;
  const KvPages& pg = t.pages;
  const i64 head = off(x, b, g, 0, 0);
  if (pg.table == nullptr) return {head + j * x.stride[2], j};
  const i64 blk = pg.table[j / pg.rows], r = j % pg.rows;
  return {head + blk * (key ? pg.k_block : pg.v_block) + r * x.stride[2],
          blk * (key ? t.codes.k_block : t.codes.v_block) + r};
}

// Kv head g's scales of a quantized cache's K (key) or V, indexed by CacheRow::scale_at.
inline const float* code_scales(const KvCodes& cd, bool key, i64 g) {
  return (key ? cd.k_scale : cd.v_scale) + g * (key ? cd.k_head : cd.v_head);
}
// The scales of rows [j0, j0 + n) of kv head (b, g) of a quantized cache's K (key) or V, into out.
inline void cache_scales(const Tensors& t, bool key, i64 b, i64 g, i64 j0, i64 n, float* out) {
  const float* scales = code_scales(t.codes, key, g);
  for (i64 c = 0; c < n; ++c) out[c] = scales[cache_row(t, key, b, g, j0 + c).scale_at];
}

// Rows [j0, j0 + n) of kv head (b, g) of such a cache's K (key) or V as rows of ld floats,
// zero-padded: each row found through the block table where paged (cache_row), and a quantized
// row's bytes widened to code value × the row's scale, as dequantize_kv computes them
// (widen_codes; a cache's head dimension is contiguous, kvcache.cpp): the tiled loop reads the
// codes in place, a tile at a time, never a float copy of the cache. Returns whether every value
// is finite.
inline bool pack_cache_rows(const Tensors& t, bool key, i64 b, i64 g, i64 j0, i64 n, i64 D, float* out, i64 ld) {
  const InView& x = key ? t.k : t.v;
  const KvCodes& cd = t.codes;
  const float* const scales = cd.kind == KvCodes::Kind::none ? nullptr : code_scales(cd, key, g);
  for (i64 c = 0; c < n; ++c) {
    const CacheRow row = cache_row(t, key, b, g, j0 + c);
    float* o = out + c * ld;
    if (scales == nullptr)
      load_row(x, row.at, D, o, 1);
    else
      widen_codes(cd.kind, static_cast<const std::uint8_t*>(x.bits) + row.at, D, scales[row.scale_at], o);
    for (i64 d = D; d < ld; ++d) o[d] = 0.0f;
  }
  return rows_finite(out, ld, n, D);
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

// The same of a call's K (key) or V: a KV cache's rows (cache_rows) as pack_cache_rows finds and
// widens them, scanned whatever scan_in_place says (the packing's scan).
inline RowsOperand kv_rows_operand(const Tensors& t, bool key, i64 b, i64 g, i64 r0, i64 n, i64 D, float* buf,
                                   bool scan_in_place) {
  if (!cache_rows(t)) return rows_operand(key ? t.k : t.v, b, g, r0, n, D, buf, scan_in_place);
  const i64 ld = round_up(D, kPad);
  return {buf, ld, ld, pack_cache_rows(t, key, b, g, r0, n, D, buf, ld) ? Finite::yes : Finite::no};
}

// Whether a call's K (key) or V is a paged fp32 cache whose rows a GEMM can read in place block by
// block (rows_in_place within a block: a heads-major cache's), where the tiled loop would otherwise
// copy them out (pack_cache_rows).
inline bool paged_rows_in_place(const Tensors& t, bool key, i64 D) {
  return t.pages.table != nullptr && t.codes.kind == KvCodes::Kind::none && rows_in_place(key ? t.k : t.v, D);
}
// The first row of key j of kv head (b, g) in such a cache, and the keys from j to the end of its
// block (a run of rows at the tensor's row stride).
struct BlockRun {
  const float* rows;
  i64 keys;
};
inline BlockRun block_run(const Tensors& t, bool key, i64 b, i64 g, i64 j) {
  return {(key ? t.k : t.v).data + cache_row(t, key, b, g, j).at, t.pages.rows - j % t.pages.rows};
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
