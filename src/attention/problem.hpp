// problem.hpp — one validated description of an attention call.
//
// validate_forward / validate_backward check every argument once and produce a
// Problem: sizes, the resolved temperature, the structural mask as a visible
// key range per query row, and the explicit masks with broadcast strides set
// to zero. Both kernels (reference and fast) consume only this.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "sdpa/attention.hpp"
#include "sdpa/half.hpp"

namespace sdpa::detail {

using i64 = std::int64_t;

/// What one row of the explicit masks lets through, over keys [0, Nk): keys [first, last] hold
/// every key whose keep is true and whose bias is not -inf (none when last < first), and
/// `dense` says that every key in between is plainly visible (keep true, bias ±0), so the
/// masks change no score there. Computed once per call (mask_rows.hpp).
struct MaskRow {
  std::int64_t first, last;
  bool dense;
};

struct Problem {
  i64 B = 0, Hq = 0, Hkv = 0, Nq = 0, Nk = 0, Dk = 0, Dv = 0;
  i64 group = 1;  // Hq / Hkv: query head h reads kv head h / group
  Dtype dtype = Dtype::f32;  // of q, k, v, out, dout, dq, dk, dv (lse is always fp32)
  // fp16 backward on AMX only: every value of q, k, v and dout is finite (api.cpp scans them
  // where the AMX table runs an fp16 backward). Split into bf16 hi + lo, an infinite value's
  // products with the other operand's lo would be inf·0 = NaN where the widened product is
  // ±inf, so a call with one takes the widening path.
  bool inputs_finite = false;

  double scale = 1.0;    // β
  double softcap = 0.0;  // c; 0 = no soft-cap
  bool has_softcap = false;

  // Structural mask: key j is visible to query i iff lo(i) <= j <= hi(i).
  // d_i = i + diag_offset is the diagonal the causal mask and the window follow.
  bool causal = false;
  i64 diag_offset = 0;
  i64 window_left = -1, window_right = -1;  // -1: unbounded

  // Dropout: p_ij kept iff dropout.keep(b, h, Hq, i, j) (decided at the sequence's
  // positions row0 + i, key0 + j), scaled by 1/(1 - p). The fast kernel reads the stream
  // and the scale resolved here (it calls no inline code shared with other objects;
  // kernel/common.inl, dropout_tile).
  Dropout dropout{};
  bool has_dropout = false;
  DropoutStream dropout_stream{};
  float dropout_scale = 1.0f;  // 1/(1 - p) in fp32

  // Attention sinks (Options::sinks): one logit per query head, read as
  // sinks.data[h * sinks.stride[0]] (no inline accessor: the kernel calls no shared inline code).
  View1<const float> sinks{};
  bool has_sinks = false;

  // Explicit masks, shape (B, Hq, Nq, Nk) with stride 0 on broadcast dims; empty = none.
  View4<const float> mask{};
  View4<const std::uint8_t> keep{};
  // With either mask: each mask row's MaskRow, row (b, h, i) at mask_rows[b·s0 + h·s1 + i·s2]
  // (mask_row_stride; 0 along a dimension both masks broadcast), and whether every row is
  // dense. Set by the fast path's call setup (api.cpp, MaskRowTable); null for the reference.
  const MaskRow* mask_rows = nullptr;
  i64 mask_row_stride[3] = {0, 0, 0};
  bool mask_rows_dense = false;

  /// First visible key of query row i (may exceed hi(i): the row is empty).
  i64 lo(i64 i) const {
    if (window_left < 0) return 0;
    return std::max<i64>(0, i + diag_offset - window_left);
  }
  /// Last visible key of query row i (may be < 0: the row is empty).
  i64 hi(i64 i) const {
    i64 h = Nk - 1;
    const i64 d = i + diag_offset;
    if (causal) h = std::min(h, d);
    if (window_right >= 0) h = std::min(h, d + window_right);
    return h;
  }
  /// Whether the structural mask lets query i see key j.
  bool visible(i64 i, i64 j) const { return j >= lo(i) && j <= hi(i); }

  /// The explicit-mask contribution for (b, h, i, j): 0, a finite additive
  /// value, or -inf when masked (keep-mask false, or mask = -inf).
  float explicit_bias(i64 b, i64 h, i64 i, i64 j) const {
    float bias = 0.0f;
    if (!keep.empty() && keep(b, h, i, j) == 0) return -std::numeric_limits<float>::infinity();
    if (!mask.empty()) bias = mask(b, h, i, j);
    return bias;
  }
};

/// A (B, H, N, D) tensor of one call in the call's dtype. fp32: the View4 part, read and
/// written in place. bf16 / fp16: `data` is null (so a path that forgot the dtype fails at
/// once) and `bits` holds the 16-bit elements at the same element strides; the kernel widens
/// them on load and rounds once on store (convert on load).
template <class F>  // const float (inputs) or float (outputs)
struct DtypeView : View4<F> {
  std::conditional_t<std::is_const_v<F>, const void*, void*> bits = nullptr;
  Dtype dtype = Dtype::f32;
  i64 element_bytes() const { return dtype == Dtype::f32 ? 4 : 2; }  // of the call's dtype

  DtypeView() = default;
  DtypeView(View4<F> v) : View4<F>(v) {}  // NOLINT: an fp32 view converts
  template <class H>
    requires(std::is_same_v<std::remove_const_t<H>, bf16> || std::is_same_v<std::remove_const_t<H>, fp16>)
  DtypeView(View4<H> v)  // NOLINT: a 16-bit view converts
      : View4<F>{nullptr, v.shape, v.stride}, bits(v.data), dtype(dtype_of<std::remove_const_t<H>>()) {}
};
using InView = DtypeView<const float>;
using OutView = DtypeView<float>;

/// The tensors of one call; views not used by a pass are empty. All of q, k, v, out, dout,
/// dq, dk, dv have Problem::dtype; lse is fp32.
// K or V of every (b, kv head) packed once per call, in the layout a kernel's forward reads
// it, where the kernel asks for one (fast.hpp, FastKernels::forward_pack_layout; api.cpp
// packs it before the items). Head (b, g) starts at element (b·Hkv + g)·per_head of `data`
// (16-bit elements), rows `ld` apart; finite[(b·Hkv + g)·tiles + tile]: whether that key
// tile's values are all finite. data null: the kernel packs it itself, tile by tile.
struct Packed16 {
  const void* data = nullptr;
  i64 ld = 0, per_head = 0, tiles = 0;
  const std::uint8_t* finite = nullptr;
};

/// A paged KV cache (sdpa/kvcache.hpp) as the kernel reads it in place: Tensors::k and v
/// point at block 0 of the cache, with the head and row strides of a block, and row j of a
/// head lives in block table[j / rows], at row j % rows; k_block, v_block: elements from one
/// block to the next. The fused decoding loop takes rows that are a multiple of 16 (it resolves
/// 16 keys at a time), the tiled loop and the 16-bit engine's any (row by row). Null table: K
/// and V are ordinary strided views.
struct KvPages {
  const std::int32_t* table = nullptr;
  i64 rows = 0;
  i64 k_block = 0, v_block = 0;
};

/// A quantized KV cache's elements (sdpa/kvcache.hpp, QuantizedKvCache): one byte each, read
/// by the fused decoding loop as code × scale. Distinct types so each has its own load.
struct I8Code {
  std::int8_t bits;
};
struct E4M3Code {
  std::uint8_t bits;
};

/// The value of an e4m3 byte (finite codes only: 0x7F and 0xFF, NaN, are never written).
/// Exponent 0: subnormal, m · 2^-9; else (1 + m/8) · 2^(e - 7).
inline float e4m3_value(std::uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float mag =
      e == 0 ? static_cast<float>(m) * 0x1p-9f : __builtin_ldexpf(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (b & 0x80) != 0 ? -mag : mag;
}

/// Which codes Tensors::k and v hold (their `bits` then point at the bytes) and their scales:
/// key j of kv head g has scale k_scale[g·k_head + j] for a contiguous view (the pointer at the
/// view's batch), and k_scale[blk·k_block + g·k_head + row] in a paged cache's block blk.
/// The fused decoding loop widens the bytes by its own vector loads (Ops); the tiled loop, which
/// takes the calls with more query lanes (chunked prefill), a tile's rows at a time (widen_codes).
struct KvCodes {
  enum class Kind { none, int8, fp8_e4m3 } kind = Kind::none;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  i64 k_head = 0, v_head = 0, k_block = 0, v_block = 0;
};

struct Tensors {
  KvPages pages;  // only in a KV-cache call's sequences (kvcache.cpp, api.cpp's cache_sequence)
  KvCodes codes;  // likewise
  InView q, k, v, out, dout;
  View3<const float> lse_in;
  OutView out_w, dq, dk, dv;
  View3<float> lse_w;
  Packed16 k_packed, v_packed;
};

/// lse's element type for a call in T: fp32 for the 16-bit types, else T.
template <class T>
using LseOf = std::conditional_t<sizeof(T) == 2, float, T>;

template <class T>
Problem validate_forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const View4<T>& out,
                         const View3<LseOf<T>>& lse, const Options& opt);

template <class T>
Problem validate_backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                          const View4<const T>& out, const View3<const LseOf<T>>& lse, const View4<const T>& dout,
                          const View4<T>& dq, const View4<T>& dk, const View4<T>& dv, const Options& opt);

/// Every dimension of `name`'s shape at least 1, else sdpa::Error naming the tensor, the
/// dimension and its letter in `dims` (one letter per dimension, e.g. "BHND"). The one
/// message of validation, varlen and the KV cache for an empty dimension.
void check_dims(const char* name, const i64* shape, int rank, const char* dims);
template <std::size_t R>
void check_dims(const char* name, const std::array<i64, R>& shape, const char* dims) {
  check_dims(name, shape.data(), static_cast<int>(R), dims);
}

/// Options::sinks and dsinks against p.Hq: one logit per query head, finite or −∞, dsinks only
/// beside them and as long; sets p.sinks, p.has_sinks. Throws sdpa::Error naming the field.
void check_sinks(const Options& opt, Problem& p);

/// Number of worker threads for these options.
int resolve_threads(const Options& opt);

/// A whole sequence's explicit mask (…, nq or 1, nk or 1) cut to its query rows [q0, q0 + nq_cut)
/// and key columns [k0, k0 + nk_cut): a view, no copy. A dimension of the whole length is sliced,
/// a broadcast one (1) stays. The one cut behind block_options (a block of a sequence) and the
/// packed calls (a sequence of a packed batch, varlen.cpp). Throws sdpa::Error, prefixed by
/// `what`, for a dimension that is neither 1 nor the whole length.
template <class T>
View4<T> cut_mask(View4<T> m, i64 nq, i64 nk, i64 q0, i64 nq_cut, i64 k0, i64 nk_cut, const std::string& what) {
  if (m.empty()) return m;
  const i64 whole[2] = {nq, nk}, start[2] = {q0, k0}, len[2] = {nq_cut, nk_cut};
  for (int d = 0; d < 2; ++d) {
    const int dim = 2 + d;
    if (m.shape[dim] == 1) continue;
    if (m.shape[dim] != whole[d])
      throw Error(what + " has " + std::to_string(m.shape[dim]) + " along dimension " + std::to_string(dim) +
                  "; it is cut from the whole sequence's mask, which has 1 or " + std::to_string(whole[d]) + " there");
    m.data += start[d] * m.stride[dim];
    m.shape[dim] = len[d];
  }
  return m;
}

}  // namespace sdpa::detail
