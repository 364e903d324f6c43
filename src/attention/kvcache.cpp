// kvcache.cpp — attention over a KV cache (sdpa/kvcache.hpp): every argument checked, the new
// tokens written into the cache, then the sequences' attention over their cached keys.
//
// Where the fused decoding loop takes the call (decoding and short chunks: group·Nq up to its
// lanes; a paged cache's blocks a multiple of 16 rows), every cache is read in place: a contiguous
// one's sequence as a strided (1, Hkv, L, D) view, a paged one through its block table (the loop
// maps each run of 16 keys, kernel/decode.inl), a quantized one's codes and scales as they lie.
// The sequences' items (kv head, key split) then run in one pool over the threads
// (forward_cache_sequences, api.cpp): a batch of very different lengths is spread by its keys, not
// by sequence, and each sequence's bits are those of its own forward, for any thread count.
//
// A quantized cache's other calls (a long chunk of queries: chunked prefill; blocks of other sizes;
// the scalar path) run in the same pool on the tiled loop, which finds each key tile's rows
// through the block table and widens their codes as it packs the tile (kernel/operands.inl,
// pack_cache_rows), or, for bf16 queries where AMX or vdpbf16ps runs the 16-bit engine, on the
// engine's loop, which widens them to bf16 (kv_bf16_rows) and applies their scales to the scores
// and the probabilities: its codes are read in place whatever the call.
//
// So does any float cache's call with more lanes than the few-lane loops take (a chunk of
// prefill): on the loop its forward on the sequence's rows runs, the tiled one or, where AMX or
// vdpbf16ps takes the dtype, the 16-bit engine's (both find a tile's rows through the block table
// where paged), so the bits are the same.
//
// A float cache's other calls (few lanes where the decoding loop does not take them: blocks of
// other sizes, the scalar path) and the reference kernel's run each sequence as one sdpa::forward
// call, spread over the threads as varlen's are (sequences.hpp): a paged sequence's blocks gathered
// into one contiguous copy first, the reference's quantized rows dequantized.
#include "sdpa/kvcache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/fast.hpp"
#include "attention/plan.hpp"
#include "attention/problem.hpp"
#include "attention/quantize.hpp"
#include "attention/sequences.hpp"

namespace sdpa {
namespace {

using detail::i64;

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

std::string str(i64 x) { return std::to_string(x); }

// (B, N, H, D) as the (B, H, N, D) view the kernel takes (a transposed view, no copy).
template <class T>
View4<T> as_bhnd(const View4<T>& x) {
  return {
      x.data, {x.shape[0], x.shape[2], x.shape[1], x.shape[3]}, {x.stride[0], x.stride[2], x.stride[1], x.stride[3]}};
}

// Batch b of a (B, ...) view, as a batch of one.
template <class T, std::size_t R>
View<T, R> batch(View<T, R> x, i64 b) {
  x.data += b * x.stride[0];
  x.shape[0] = 1;
  return x;
}

void check_dims(const char* name, const std::array<i64, 4>& shape, const char* dims, const void* data) {
  detail::check_dims(name, shape, dims);
  if (data == nullptr) fail(std::string(name) + ": data pointer is null (shape " + shape_str(shape) + ")");
}

void check_equal(const char* name, const std::array<i64, 4>& shape, const std::array<i64, 4>& want,
                 const std::string& why) {
  if (shape != want) fail(std::string(name) + ": shape " + shape_str(shape) + " should be " + shape_str(want) + why);
}

// What the checks found: the cache's geometry and each sequence's key count after the append.
struct Layout {
  i64 B = 0, Nq = 0, Hq = 0, Hkv = 0, Dk = 0, Dv = 0, Nnew = 0;
  bool paged = false;
  i64 rows = 0;           // positions per block (paged) or per sequence (contiguous)
  i64 capacity = 0;       // positions a sequence may hold
  std::vector<i64> held;  // (B) keys before the append
  // The cache row of position p of sequence b: (block or batch index, row within it).
  template <class C>
  std::pair<i64, i64> where(const C& c, i64 b, i64 p) const {
    if (!paged) return {b, p};
    return {c.block_table(b, p / rows), p % rows};
  }
};

// The bytes a view spans, [lo, hi).
template <class X, std::size_t R>
std::pair<std::uintptr_t, std::uintptr_t> byte_span(const View<X, R>& x) {
  i64 lo = 0, hi = 0;
  for (std::size_t d = 0; d < R; ++d) (x.stride[d] < 0 ? lo : hi) += (x.shape[d] - 1) * x.stride[d];
  const auto base = reinterpret_cast<std::uintptr_t>(x.data);
  return {base + static_cast<std::uintptr_t>(lo * static_cast<i64>(sizeof(X))),
          base + static_cast<std::uintptr_t>((hi + 1) * static_cast<i64>(sizeof(X)))};
}

// A quantized cache's own checks: its scales' shapes, out and lse apart from the codes and scales
// (validation sees K and V by their shapes alone), and new tokens finite (no code holds a NaN or an
// infinity, and none may be written as a finite one).
template <class T>
void check_codes(const QuantizedKvCache& c, const Layout& g, const View4<const T>& k_new, const View4<const T>& v_new,
                 const View4<T>& out, const View3<float>& lse) {
  for (const auto& [name, s, x] : {std::tuple{"k_scale", c.k_scale, c.k}, std::tuple{"v_scale", c.v_scale, c.v}}) {
    if (s.data == nullptr) fail(std::string(name) + ": data pointer is null");
    const std::array<i64, 3> want{x.shape[0], g.Hkv, x.shape[1]};
    if (s.shape != want)
      fail(std::string(name) + ": shape " + shape_str(s.shape) + " should be " + shape_str(want) +
           (g.paged ? " ([blocks, Hkv, block_size]: one scale per position and kv head)"
                    : " ([B, Hkv, Nmax]: one scale per position and kv head)"));
    if (s.stride[2] != 1 && s.shape[2] > 1)
      fail(std::string(name) + ": the positions must be contiguous (stride 1), got strides " + shape_str(s.stride));
  }
  const auto apart = [](const char* a, auto sa, const char* b, auto sb) {
    if (sa.first < sb.second && sb.first < sa.second)
      fail(std::string(a) + " aliases " + b + "; outputs must not share memory with the cache");
  };
  for (const auto& [name, span] :
       {std::pair{"k_cache", byte_span(c.k)}, std::pair{"v_cache", byte_span(c.v)},
        std::pair{"k_scale", byte_span(c.k_scale)}, std::pair{"v_scale", byte_span(c.v_scale)}}) {
    apart("out", byte_span(out), name, span);
    if (lse.data != nullptr) apart("lse", byte_span(lse), name, span);
  }
  if (k_new.data == nullptr) return;
  for (const auto& [name, x] : {std::pair{"k_new", k_new}, std::pair{"v_new", v_new}})
    detail::require_finite(x, name, std::string("an ") + kv_quant_name(c.quant) + " cache");
}

// Every check of a call, before anything is written. C: KvCache<T> or QuantizedKvCache.
template <class T, class C>
Layout check_call(const View4<const T>& q, const C& c, const View4<const T>& k_new, const View4<const T>& v_new,
                  const View4<T>& out, const View3<float>& lse, const Options& opt) {
  Layout g;
  check_dims("q", q.shape, "BNHD", q.data);
  g.B = q.shape[0], g.Nq = q.shape[1], g.Hq = q.shape[2], g.Dk = q.shape[3];
  g.paged = c.block_table.data != nullptr || c.block_table.shape != std::array<i64, 2>{0, 0};
  check_dims("k_cache", c.k.shape, g.paged ? "PRHD" : "BNHD", c.k.data);
  check_dims("v_cache", c.v.shape, g.paged ? "PRHD" : "BNHD", c.v.data);
  g.Hkv = c.k.shape[2], g.Dv = c.v.shape[3], g.rows = c.k.shape[1];
  if (c.k.shape[3] != g.Dk) fail("k_cache: head dim " + str(c.k.shape[3]) + " differs from q's " + str(g.Dk));
  if (g.Hq % g.Hkv != 0)
    fail("k_cache: query heads Hq = " + str(g.Hq) + " is not a multiple of the cache's kv heads Hkv = " + str(g.Hkv));
  check_equal("v_cache", c.v.shape, {c.k.shape[0], c.k.shape[1], g.Hkv, g.Dv}, " (k_cache's first three dimensions)");
  if (c.k.stride[3] != 1 || c.v.stride[3] != 1)
    fail("k_cache, v_cache: the head dimension must be contiguous (stride 1), got strides " + shape_str(c.k.stride) +
         " and " + shape_str(c.v.stride));
  if (g.paged) {
    if (c.block_table.data == nullptr) fail("block_table: data pointer is null");
    if (c.block_table.shape[0] != g.B || c.block_table.shape[1] < 1)
      fail("block_table: shape " + shape_str(c.block_table.shape) + " should be [B, max_blocks] with B = " + str(g.B) +
           " (q's batch) and max_blocks >= 1");
    if (__builtin_mul_overflow(c.block_table.shape[1], g.rows, &g.capacity))
      fail("block_table: max_blocks " + str(c.block_table.shape[1]) + " times block_size " + str(g.rows) +
           " overflows");
  } else {
    if (c.k.shape[0] != g.B)
      fail("k_cache: batch " + str(c.k.shape[0]) + " differs from q's " + str(g.B) +
           " (a contiguous cache holds one sequence per batch row; pass block_table for a paged one)");
    g.capacity = g.rows;
  }
  const bool with_new = k_new.data != nullptr || v_new.data != nullptr;
  if (with_new) {
    if (k_new.data == nullptr || v_new.data == nullptr)
      fail(std::string(k_new.data == nullptr ? "k_new" : "v_new") + ": missing; new keys and values come together");
    check_dims("k_new", k_new.shape, "BNHD", k_new.data);
    check_dims("v_new", v_new.shape, "BNHD", v_new.data);
    g.Nnew = k_new.shape[1];
    check_equal("k_new", k_new.shape, {g.B, g.Nnew, g.Hkv, g.Dk}, " ([B, Nnew, Hkv, Dk] of q and the cache)");
    check_equal("v_new", v_new.shape, {g.B, g.Nnew, g.Hkv, g.Dv}, " ([B, Nnew, Hkv, Dv], as k_new)");
  }
  if (c.seqlens.data == nullptr) fail("cache_seqlens: data pointer is null");
  if (c.seqlens.shape[0] != g.B)
    fail("cache_seqlens: shape [" + str(c.seqlens.shape[0]) + "] should be [B] = [" + str(g.B) + "]");
  g.held.resize(static_cast<std::size_t>(g.B));
  for (i64 b = 0; b < g.B; ++b) {
    const i64 n = c.seqlens(b);
    if (n < 0) fail("cache_seqlens: entry " + str(b) + " is " + str(n) + "; a sequence holds >= 0 tokens");
    if (n + g.Nnew > g.capacity)
      fail("cache_seqlens: entry " + str(b) + " is " + str(n) + ", and with " + str(g.Nnew) + " new tokens sequence " +
           str(b) + " needs " + str(n + g.Nnew) + " positions; the cache holds " + str(g.capacity) +
           (g.paged ? " (max_blocks × block_size)" : " (k_cache's dimension 1)"));
    g.held[static_cast<std::size_t>(b)] = n;
    if (g.paged)  // every block the sequence reads or writes, in range
      for (i64 j = 0; j * g.rows < n + g.Nnew; ++j) {
        const i64 blk = c.block_table(b, j);
        if (blk < 0 || blk >= c.k.shape[0])
          fail("block_table: entry [" + str(b) + ", " + str(j) + "] is " + str(blk) + ", outside the cache's " +
               str(c.k.shape[0]) + " blocks (k_cache's dimension 0); sequence " + str(b) + " reads blocks 0.." +
               str((n + g.Nnew - 1) / g.rows) + " of its row");
      }
  }
  if (with_new && g.paged) {
    // A row a new token is written into must be no other position's: not another new token's (two sequences
    // appending into one block), not a key some sequence reads (a block shared for its prefix is read-only).
    struct Write {
      i64 block, row, b, pos;
      bool operator<(const Write& o) const { return std::tie(block, row) < std::tie(o.block, o.row); }
    };
    std::vector<Write> written;
    written.reserve(static_cast<std::size_t>(g.B * g.Nnew));
    for (i64 b = 0; b < g.B; ++b)
      for (i64 t = 0; t < g.Nnew; ++t) {
        const i64 pos = g.held[static_cast<std::size_t>(b)] + t;
        const auto [blk, row] = g.where(c, b, pos);
        written.push_back({blk, row, b, pos});
      }
    std::sort(written.begin(), written.end());
    for (std::size_t x = 1; x < written.size(); ++x)
      if (!(written[x - 1] < written[x]))
        fail("block_table: block " + str(written[x].block) + " row " + str(written[x].row) +
             " is written by two new tokens (sequences " + str(written[x - 1].b) + " and " + str(written[x].b) +
             " append into one block)");
    for (i64 b = 0; b < g.B; ++b) {
      const i64 L = g.held[static_cast<std::size_t>(b)] + g.Nnew;
      for (i64 j = 0; j * g.rows < L; ++j) {
        const i64 blk = c.block_table(b, j);
        for (auto w = std::lower_bound(written.begin(), written.end(), Write{blk, 0, 0, 0});
             w != written.end() && w->block == blk; ++w)
          if (j * g.rows + w->row < L && (w->b != b || w->pos != j * g.rows + w->row))
            fail("block_table: block " + str(blk) + " row " + str(w->row) + " is written by sequence " + str(w->b) +
                 "'s new token and read by sequence " + str(b) + " (position " + str(j * g.rows + w->row) +
                 "); a block shared between sequences is read-only");
      }
    }
  }
  if (!opt.mask.empty() || !opt.keep.empty())
    fail(
        "mask: an explicit mask is not taken over a KV cache (each sequence's length, causal and window say "
        "which keys it sees)");
  if (opt.dropout.p != 0.0) fail("dropout: not taken over a KV cache (inference)");
  if (opt.diagonal) fail("diagonal: not taken over a KV cache (causal aligns each sequence by its own length)");
  if (!opt.dsinks.empty()) fail("dsinks: a KV cache call has no backward");
  if (opt.causal == Causal::top_left)
    fail(
        "causal: top_left is refused over a KV cache; the queries are each sequence's last Nq positions "
        "(bottom_right)");
  check_equal("out", out.shape, {g.B, g.Nq, g.Hq, g.Dv}, " ([B, Nq, Hq, Dv])");
  // The options, q, out and lse through the one validation, on the batch seen with the cache's first
  // rows as its keys (a quantized cache's by their shapes: views of q's first element, stride 0).
  if constexpr (std::is_same_v<C, KvCache<T>>) {
    View4<const T> k0 = as_bhnd(View4<const T>(c.k)), v0 = as_bhnd(View4<const T>(c.v));
    if (g.paged) k0.shape[0] = v0.shape[0] = g.B, k0.stride[0] = v0.stride[0] = 0;
    detail::validate_forward<T>(as_bhnd(q), k0, v0, as_bhnd(out), lse, opt);
  } else {
    check_codes<T>(c, g, k_new, v_new, out, lse);
    const View4<const T> k0{q.data, {g.B, g.Hkv, g.rows, g.Dk}, {0, 0, 0, 0}};
    const View4<const T> v0{q.data, {g.B, g.Hkv, g.rows, g.Dv}, {0, 0, 0, 0}};
    detail::validate_forward<T>(as_bhnd(q), k0, v0, as_bhnd(out), lse, opt);
  }
  return g;
}

// Writes k_new and v_new into their positions (the checks done).
template <class T>
void append(const KvCache<T>& c, const View4<const T>& k_new, const View4<const T>& v_new, const Layout& g, Isa) {
  for (i64 b = 0; b < g.B; ++b)
    for (i64 t = 0; t < g.Nnew; ++t) {
      const auto [blk, row] = g.where(c, b, g.held[static_cast<std::size_t>(b)] + t);
      for (i64 h = 0; h < g.Hkv; ++h) {
        for (i64 e = 0; e < g.Dk; ++e) c.k(blk, row, h, e) = k_new(b, t, h, e);
        for (i64 e = 0; e < g.Dv; ++e) c.v(blk, row, h, e) = v_new(b, t, h, e);
      }
    }
}

// Quantizes k_new and v_new into their positions (the checks done: every value finite), each row
// with its scale.
template <class T>
void append(const QuantizedKvCache& c, const View4<const T>& k_new, const View4<const T>& v_new, const Layout& g,
            Isa isa) {
  detail::RowBuffer row(std::max(g.Dk, g.Dv));
  const detail::ConvertKernels& convert = detail::convert_kernels(isa);
  const auto put = [&](const View4<const T>& x, const View4<std::uint8_t>& codes, const View3<float>& scales, i64 b,
                       i64 t, i64 h, i64 blk, i64 r) {
    scales(blk, h, r) = detail::quantize_row(c.quant, &x(b, t, h, 0), x.shape[3], x.stride[3], &codes(blk, r, h, 0),
                                             codes.stride[3], row.data(), convert);
  };
  for (i64 b = 0; b < g.B; ++b)
    for (i64 t = 0; t < g.Nnew; ++t) {
      const auto [blk, r] = g.where(c, b, g.held[static_cast<std::size_t>(b)] + t);
      for (i64 h = 0; h < g.Hkv; ++h) {
        put(k_new, c.k, c.k_scale, b, t, h, blk, r);
        put(v_new, c.v, c.v_scale, b, t, h, blk, r);
      }
    }
}

// Sequence b's first L positions of a quantized cache's codes x and scales s, dequantized into buf
// as (1, Hkv, L, D) floats.
View4<const float> dequantized(const View4<std::uint8_t>& x, const View3<float>& s, const QuantizedKvCache& c,
                               const Layout& g, i64 b, i64 L, std::vector<float>& buf) {
  const i64 D = x.shape[3];
  buf.resize(static_cast<std::size_t>(L * g.Hkv * D));
  for (i64 p = 0; p < L; ++p) {
    const auto [blk, row] = g.where(c, b, p);
    for (i64 h = 0; h < g.Hkv; ++h)
      for (i64 e = 0; e < D; ++e)
        buf[static_cast<std::size_t>((p * g.Hkv + h) * D + e)] =
            detail::code_value(c.quant, x(blk, row, h, e)) * s(blk, h, row);
  }
  return {buf.data(), {1, g.Hkv, L, D}, {0, D, g.Hkv * D, 1}};
}

// Sequence b's first L positions of a paged cache x (D wide), copied into buf as (1, Hkv, L, D).
template <class T>
View4<const T> gather(const View4<T>& x, const KvCache<T>& c, const Layout& g, i64 b, i64 L, std::vector<T>& buf) {
  const i64 D = x.shape[3];
  buf.resize(static_cast<std::size_t>(L * g.Hkv * D));
  for (i64 p = 0; p < L; ++p) {
    const auto [blk, row] = g.where(c, b, p);
    for (i64 h = 0; h < g.Hkv; ++h)
      std::memcpy(&buf[static_cast<std::size_t>((p * g.Hkv + h) * D)], &x(blk, row, h, 0),
                  static_cast<std::size_t>(D) * sizeof(T));
  }
  return {buf.data(), {1, g.Hkv, L, D}, {0, D, g.Hkv * D, 1}};
}

// Sequence b's K and V rows of a cache (float or codes, X) as the fused decoding loop reads them, in
// place: (1, Hkv, L, D) views of batch b's rows (contiguous), or of block 0's whose rows `pages`
// maps through the sequence's row of the block table (paged).
template <class X>
struct LoopRows {
  View4<const X> k, v;
  detail::KvPages pages;
};
template <class X, class C>
LoopRows<X> loop_rows(const C& c, const Layout& g, i64 b, i64 L, const std::int32_t* table) {
  LoopRows<X> r{as_bhnd(View4<const X>(c.k)), as_bhnd(View4<const X>(c.v)), {}};
  if (g.paged) {
    r.pages = {table, g.rows, c.k.stride[0], c.v.stride[0]};
    r.k.stride[0] = r.v.stride[0] = 0;
  } else {
    r.k.data += b * c.k.stride[0], r.v.data += b * c.v.stride[0];
  }
  r.k.shape[0] = r.v.shape[0] = 1, r.k.shape[2] = r.v.shape[2] = L;
  return r;
}

// Sequence b of a float cache for the fused decoding loop.
template <class T>
detail::CacheSequence loop_sequence(const KvCache<T>& c, const Layout& g, i64 b, i64 L, const std::int32_t* table,
                                    const View4<const T>& qb, const View4<T>& o, const View3<float>& l,
                                    const Options& opt) {
  const LoopRows<T> r = loop_rows<T>(c, g, b, L, table);
  return detail::cache_sequence<T>(qb, r.k, r.v, r.pages, o, l, opt);
}

// The same over a quantized cache: its codes, and its scales (block 0's, or batch b's).
template <class T>
detail::CacheSequence loop_sequence(const QuantizedKvCache& c, const Layout& g, i64 b, i64 L, const std::int32_t* table,
                                    const View4<const T>& qb, const View4<T>& o, const View3<float>& l,
                                    const Options& opt) {
  const LoopRows<std::uint8_t> r = loop_rows<std::uint8_t>(c, g, b, L, table);
  detail::KvCodes codes;
  codes.kind = detail::codes_kind(c.quant);
  codes.k_head = c.k_scale.stride[1], codes.v_head = c.v_scale.stride[1];
  if (g.paged) {
    codes.k_scale = c.k_scale.data, codes.v_scale = c.v_scale.data;
    codes.k_block = c.k_scale.stride[0], codes.v_block = c.v_scale.stride[0];
  } else {
    codes.k_scale = c.k_scale.data + b * c.k_scale.stride[0], codes.v_scale = c.v_scale.data + b * c.v_scale.stride[0];
  }
  return detail::cache_sequence<T>(qb, r.k, r.v, r.pages, codes, o, l, opt);
}

// Sequence b's attention where the fused decoding loop does not take the call: a float cache read
// in place (contiguous) or gathered into one contiguous copy (paged) for sdpa::forward.
template <class T>
void attend(const KvCache<T>& c, const Layout& g, i64 b, i64 L, const View4<const T>& qb, const View4<T>& o,
            const View3<float>& l, const Options& so) {
  std::vector<T> kbuf, vbuf;
  View4<const T> kb, vb;
  if (g.paged) {
    kb = gather(c.k, c, g, b, L, kbuf);
    vb = gather(c.v, c, g, b, L, vbuf);
  } else {
    kb = as_bhnd(View4<const T>(batch(c.k, b)));
    vb = as_bhnd(View4<const T>(batch(c.v, b)));
    kb.shape[2] = vb.shape[2] = L;
  }
  forward(qb, kb, vb, o, l, so);
}

// The same over a quantized cache, for the reference kernel (the fast one reads the codes in
// place): its rows dequantized into a float copy (q and out through float too).
template <class T>
void attend(const QuantizedKvCache& c, const Layout& g, i64 b, i64 L, const View4<const T>& qb, const View4<T>& o,
            const View3<float>& l, const Options& so) {
  std::vector<float> kbuf, vbuf;
  const View4<const float> kb = dequantized(c.k, c.k_scale, c, g, b, L, kbuf);
  const View4<const float> vb = dequantized(c.v, c.v_scale, c, g, b, L, vbuf);
  if constexpr (std::is_same_v<T, float>) {
    forward(qb, kb, vb, o, l, so);
  } else {  // q widened, out rounded once
    std::vector<float> qf(static_cast<std::size_t>(qb.numel())), of(static_cast<std::size_t>(o.numel()));
    const View4<float> qv = contiguous(qf.data(), qb.shape), ov = contiguous(of.data(), o.shape);
    for (i64 h = 0; h < qb.shape[1]; ++h)
      for (i64 i = 0; i < qb.shape[2]; ++i)
        for (i64 e = 0; e < qb.shape[3]; ++e) qv(0, h, i, e) = static_cast<float>(qb(0, h, i, e));
    forward(View4<const float>(qv), kb, vb, ov, l, so);
    for (i64 h = 0; h < o.shape[1]; ++h)
      for (i64 i = 0; i < o.shape[2]; ++i)
        for (i64 e = 0; e < o.shape[3]; ++e) o(0, h, i, e) = T(ov(0, h, i, e));
  }
}

template <class T, class C>
void forward_kvcache_as(View4<const T> q, const C& c, View4<const T> k_new, View4<const T> v_new, View4<T> out,
                        View3<float> lse, const Options& opt) {
  const Layout g = check_call<T>(q, c, k_new, v_new, out, lse, opt);
  append(c, k_new, v_new, g, opt.isa);

  const bool want_lse = lse.data != nullptr;
  const auto length = [&](i64 b) { return g.held[static_cast<std::size_t>(b)] + g.Nnew; };
  const auto empty_row = [&](i64 b) {  // no key: the contract's empty row, its weight on the sink
    const View4<T> o = as_bhnd(batch(out, b));
    for (i64 h = 0; h < g.Hq; ++h)
      for (i64 i = 0; i < g.Nq; ++i) {
        for (i64 e = 0; e < g.Dv; ++e) o(0, h, i, e) = T(0.0f);
        if (want_lse) lse(b, h, i) = opt.sinks.empty() ? -std::numeric_limits<float>::infinity() : opt.sinks(h);
      }
  };
  detail::PlanRecord record(opt, "forward_kvcache", dtype_of<T>());
  // Whether the kernel reads the cache in place: a quantized cache always (the fused decoding loop
  // or the tiled loop reads its codes, kernel/forward.inl); a float one where the fused decoding
  // loop takes the call (the ISA has it, few enough query lanes per kv head, and blocks of a
  // multiple of kDecodeBlockRows rows), and wherever the call has more lanes than the few-lane
  // loops take: the loop its forward would run on the sequence's rows (the same bits), the tiled
  // one or the 16-bit engine's where AMX or vdpbf16ps takes the dtype, each finding a key tile's
  // rows through the block table where paged. Gathering a paged cache's blocks into a copy first
  // cost a chunk of prefill 2.6 × its contiguous time in fp32 (Zen 3) and 3.2 × in bf16 on AMX, and
  // sdpa::forward on a contiguous one's rows (its per-call copies and packings) up to 2 × the loop
  // in place (docs/performance.md). Every sequence's items then run in one pool over the threads
  // (forward_cache_sequences), long and short sequences side by side.
  constexpr bool quantized = std::is_same_v<C, QuantizedKvCache>;
  const detail::FastKernels& kern = detail::kernels_for(opt);
  const i64 lanes = g.Hq / g.Hkv * g.Nq;
  const bool decoding = (!g.paged || g.rows % detail::kDecodeBlockRows == 0) && kern.paged_lanes >= lanes;
  const bool in_kernel = opt.kernel == Kernel::fast && (quantized || decoding || lanes > detail::kFewLanes);
  if (in_kernel) {
    std::vector<std::int32_t> tables;  // (B, max_blocks): each sequence's row of the block table
    const i64 max_blocks = g.paged ? c.block_table.shape[1] : 0;
    if (g.paged)
      for (i64 b = 0; b < g.B; ++b)
        for (i64 j = 0; j < max_blocks; ++j) tables.push_back(c.block_table(b, j));
    std::vector<detail::CacheSequence> seqs;
    seqs.reserve(static_cast<std::size_t>(g.B));
    for (i64 b = 0; b < g.B; ++b) {
      if (length(b) == 0) {
        empty_row(b);
        continue;
      }
      seqs.push_back(loop_sequence<T>(c, g, b, length(b), tables.data() + b * max_blocks, as_bhnd(batch(q, b)),
                                      as_bhnd(batch(out, b)), want_lse ? batch(lse, b) : View3<float>{}, opt));
    }
    detail::forward_cache_sequences(seqs, opt, record.get());
    if (Plan* plan = record.get()) {
      const auto n = static_cast<i64>(seqs.size());
      plan->paged_sequences = g.paged ? n : 0;
      plan->quantized_sequences = quantized ? n : 0;
    }
    return record.finish();
  }

  std::vector<i64> items(static_cast<std::size_t>(g.B));
  std::vector<double> cost(static_cast<std::size_t>(g.B));
  for (i64 b = 0; b < g.B; ++b) {
    // The work items forward makes of it (key splits included), so a long sequence runs alone with
    // every thread and short ones side by side.
    items[static_cast<std::size_t>(b)] = detail::forward_items(1, g.Hkv, g.Hq / g.Hkv * g.Nq, length(b));
    cost[static_cast<std::size_t>(b)] = static_cast<double>(g.Nq) * static_cast<double>(length(b));
  }
  std::vector<Plan> plans(record.get() != nullptr ? static_cast<std::size_t>(g.B) : 0);
  detail::run_sequences(
      static_cast<std::size_t>(g.B), items, cost, detail::resolve_threads(opt), [&](std::size_t s, int threads) {
        const detail::PlanLogPause one_line_per_batch;
        const i64 b = static_cast<i64>(s);
        if (length(b) == 0) return empty_row(b);
        Options so = opt;
        so.threads = threads;
        so.plan = plans.empty() ? nullptr : &plans[s];
        attend<T>(c, g, b, length(b), as_bhnd(batch(q, b)), as_bhnd(batch(out, b)),
                  want_lse ? batch(lse, b) : View3<float>{}, so);
      });
  if (Plan* plan = record.get()) {
    plan->sequences = 0;
    for (const Plan& sequence : plans) detail::merge_plan(*plan, sequence);
  }
  record.finish();
}

}  // namespace

void forward_kvcache(View4<const float> q, const KvCache<float>& cache, View4<const float> k_new,
                     View4<const float> v_new, View4<float> out, View3<float> lse, const Options& opt) {
  forward_kvcache_as<float>(q, cache, k_new, v_new, out, lse, opt);
}
void forward_kvcache(View4<const bf16> q, const KvCache<bf16>& cache, View4<const bf16> k_new, View4<const bf16> v_new,
                     View4<bf16> out, View3<float> lse, const Options& opt) {
  forward_kvcache_as<bf16>(q, cache, k_new, v_new, out, lse, opt);
}
void forward_kvcache(View4<const fp16> q, const KvCache<fp16>& cache, View4<const fp16> k_new, View4<const fp16> v_new,
                     View4<fp16> out, View3<float> lse, const Options& opt) {
  forward_kvcache_as<fp16>(q, cache, k_new, v_new, out, lse, opt);
}

void forward_kvcache(View4<const float> q, const QuantizedKvCache& cache, View4<const float> k_new,
                     View4<const float> v_new, View4<float> out, View3<float> lse, const Options& opt) {
  forward_kvcache_as<float>(q, cache, k_new, v_new, out, lse, opt);
}
void forward_kvcache(View4<const bf16> q, const QuantizedKvCache& cache, View4<const bf16> k_new,
                     View4<const bf16> v_new, View4<bf16> out, View3<float> lse, const Options& opt) {
  forward_kvcache_as<bf16>(q, cache, k_new, v_new, out, lse, opt);
}
void forward_kvcache(View4<const fp16> q, const QuantizedKvCache& cache, View4<const fp16> k_new,
                     View4<const fp16> v_new, View4<fp16> out, View3<float> lse, const Options& opt) {
  forward_kvcache_as<fp16>(q, cache, k_new, v_new, out, lse, opt);
}

}  // namespace sdpa
