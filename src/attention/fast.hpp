// fast.hpp — the tiled online-softmax kernel's interface, one table per ISA.
//
// Work is cut into tiles so scratch memory is O(tile), never O(Nq·Nk):
//   forward   one item = (b, kv head g, kTileRows query lanes over the group's heads, a key
//             range), loops over key tiles; split-KV items write partial results merged by lse
//   backward  with at least as many (b, kv head) items as threads, one pass: one item =
//             (b, kv head) -> dk, dv and the group's dq (loops over sweeps of two key tiles,
//             then the group's query heads and query tiles); else two passes: pass A: one
//             item = (b, kv head, key tile) -> dk, dv;  pass B: one item = (b, h, query
//             tile) -> dq. Both give the same bits (kernel/backward.inl, kv_tiles).
// Every output element is written by exactly one item, in a fixed order, so the
// result does not depend on how items are spread over threads.
#pragma once

#include <type_traits>  // std::integral_constant: a block count as a type (kernel/common.inl)
#include <utility>      // std::integer_sequence (kernel/common.inl, with_count)
#include <vector>

#include "attention/engine16.hpp"
#include "attention/convert.hpp"
#include "attention/problem.hpp"

namespace sdpa::detail {

inline constexpr i64 kTileRows = 64;  // query rows per tile
inline constexpr i64 kTileCols = 64;  // keys per tile
inline constexpr i64 kPad = 16;       // padding of vector dimensions (the widest vector: 16 floats)
// Items with at most this many query lanes (decoding) take the few-lane loops, not the tiled one
// (kernel/common.inl).
inline constexpr i64 kFewLanes = 8;
// The most kv heads one forward item takes together (ForwardItem::heads).
inline constexpr i64 kMaxItemHeads = 8;
// The fused decoding loop reads a paged cache whose blocks hold a multiple of this many rows: its tile
// of keys is runs of this many rows at one stride (kernel/decode.inl, kRun).
inline constexpr i64 kDecodeBlockRows = 16;

// One forward work item. Lanes [l0, l0 + kTileRows) of the flattened (query head in the
// group, query row) index l = (h - g·group)·Nq + i; keys [j_begin, j_end) (all of them
// unless the call is split along the keys). With part_out set, the item writes its
// normalised partial output (lane l at part_out + l·Dv) and lse (part_lse[l]) instead.
// heads > 1 (at most kMaxItemHeads; api.cpp's item_heads says where): the items of
// kv heads g .. g + heads - 1, the same lanes and keys, done together; head g + x's partial results
// follow head g's at x·group·Nq lanes. Each head's bits are those of its own item.
struct ForwardItem {
  i64 b = 0, g = 0, l0 = 0;
  i64 j_begin = 0, j_end = 0;
  float* part_out = nullptr;
  float* part_lse = nullptr;
  i64 heads = 1;
};

// One worker's scratch: `floats` floats from `data`, 64-byte aligned. The kernel carves
// each item's buffers from it with the code that computed forward_scratch/backward_scratch,
// and stops (traps) rather than take more than `floats`.
struct WorkerScratch {
  float* data = nullptr;
  i64 floats = 0;
};

// The operands a kernel's forward may read packed once per call (Tensors::k_packed, v_packed).
enum class PackedOperand { k, v };
// The layout of one such operand: rows `ld` 16-bit elements apart, `per_head` elements per
// (b, kv head); per_head 0: the kernel takes no packed operand. The packing of a tile needs
// `scratch` 16-bit elements of its worker's own (api.cpp allocates them: an ISA's object
// file holds no standard-library code, kernel.isa_objects_share_no_inline_code).
// `min_items`: the fewest items per head (lane tiles) for which packing once per call pays.
struct PackLayout {
  i64 ld = 0, per_head = 0, scratch = 0, min_items = 2;
};

// The engine of a table's 16-bit products (sdpa/dispatch.hpp's Engine16; engine16.hpp): none
// (widened to fp32 on load), AMX-BF16 tiles, or AVX512_BF16 dot products.
// Which dtypes' calls an engine runs (the forward's tiled items, the backward's items; the
// fp16 backward on tiles only for finite inputs, Problem::inputs_finite): AMX tiles take bf16
// and fp16 (split into bf16 hi + lo, engine16.hpp); the dot products bf16 only, since the split
// triples the products, which at twice the FMA's rate is slower than widening fp16.
constexpr bool engine_takes(Engine16 engine, Dtype d) {
  return engine == Engine16::amx ? d != Dtype::f32 : engine == Engine16::dot && d == Dtype::bf16;
}
// Whether the engine's backward needs Problem::inputs_finite (api.cpp scans q, k, v and dout
// for it): fp16 split on tiles, where an infinity's zero lo would meet it as inf·0 = NaN.
constexpr bool engine_backward_needs_finite(Engine16 engine, Dtype d) {
  return engine == Engine16::amx && d == Dtype::fp16;
}

// Whether a backward item of the call runs its products on the table's engine: the engine
// takes the dtype, and where it needs finite inputs (fp16 split on tiles) they are. Defined
// in api.cpp (not inline: an inline function compiled into an ISA's unit could be handed to
// another path by the linker, kernel.isa_objects_share_no_inline_code).
bool backward_on_engine(Engine16 engine, const Problem& p);

// The loop a forward item ran (kernel/forward.inl's one choice), for sdpa::Plan.
enum class ForwardLoop { decoding, few_lanes, tiled, engine };

struct FastKernels {
  Engine16 engine;                          // what runs its 16-bit products
  i64 (*forward_scratch)(const Problem&, i64 heads);  // floats per worker, items of up to `heads` kv heads
  i64 (*backward_scratch)(const Problem&);       // floats per worker, two passes
  i64 (*backward_item_scratch)(const Problem&);  // floats per worker, one pass
  ForwardLoop (*forward_item)(const Problem&, const Tensors&, const ForwardItem&, WorkerScratch scratch);
  // delta: (B, Hq, Nq) row sums Σ_e dout·out, contiguous. Each returns whether the item's
  // products ran on the 16-bit engine (for sdpa::Plan, as forward_item returns its loop).
  bool (*backward_item)(const Problem&, const Tensors&, const float* delta, i64 b, i64 g, WorkerScratch scratch);
  bool (*backward_kv_tile)(const Problem&, const Tensors&, const float* delta, i64 b, i64 g, i64 j0,
                           WorkerScratch scratch);
  bool (*backward_q_tile)(const Problem&, const Tensors&, const float* delta, i64 b, i64 h, i64 i0,
                          WorkerScratch scratch);
  // The vector math the kernel uses, over n floats (n a multiple of kPad), for tests.
  void (*exp)(const float* x, float* y, i64 n);
  void (*tanh)(const float* x, float* y, i64 n);
  // K or V packed once per call for forward_item (Tensors::k_packed, v_packed): the layout
  // per (b, kv head) this kernel reads (per_head 0: none, for this problem), and the packing
  // of key tile [j0, j0 + kTileCols) of (b, g) into its head's block; returns whether its
  // values are all finite. api.cpp allocates the buffer and runs the packing over all workers.
  PackLayout (*forward_pack_layout)(const Problem&, const Tensors&, PackedOperand which);
  bool (*forward_pack_tile)(const Problem&, const Tensors&, PackedOperand which, i64 b, i64 g, i64 j0, void* head,
                            i64 ld, void* scratch);
  // The most query lanes per kv head (group·Nq) for which forward_item reads a paged cache
  // (Tensors::pages) in its fused decoding loop: kFewLanes where the ISA has that loop, else 0.
  i64 paged_lanes;
};

// One sequence of a KV-cache call (kvcache.cpp) for the fused decoding loop: its validated problem
// (a batch of one) and tensors. q (1, Hq, Nq, Dk), out, lse as sdpa::forward's; k, v (1, Hkv, L, D)
// views of the sequence's keys, or of a paged cache's block 0 (head and row strides of a block)
// whose rows pages maps (KvPages); or a quantized cache's byte views, codes.kind and its scales
// (KvCodes). The caller has checked the cache, its block table and scales, and sends a float
// cache only where kernels_for(opt).paged_lanes covers group·Nq (a quantized one with any Nq:
// the tiled loop takes what the decoding loop does not); no mask or dropout.
struct CacheSequence {
  Problem p;
  Tensors t;
};
template <class T>
CacheSequence cache_sequence(View4<const T> q, View4<const T> k, View4<const T> v, const KvPages& pages, View4<T> out,
                             View3<float> lse, const Options& opt);
template <class T>
CacheSequence cache_sequence(View4<const T> q, View4<const std::uint8_t> k, View4<const std::uint8_t> v,
                             const KvPages& pages, const KvCodes& codes, View4<T> out, View3<float> lse,
                             const Options& opt);
// The forwards of all of them, their items (kv head, key split) in one pool over the threads;
// each sequence's bits those of sdpa::forward on it alone, for any thread count. Fills plan's
// dispatch, threads, splits and item counts where not null.
void forward_cache_sequences(const std::vector<CacheSequence>& seqs, const Options& opt, Plan* plan);
// The table a call runs: its ISA's (Options::isa, or the dispatch's), on AVX-512 the one of the
// engine the dispatch chose; a test's table while one is set (set_kernels_for_tests).
const FastKernels& kernels_for(const Options& opt);
// One ISA's table, 16-bit operands widened to fp32 (sve: the build of this CPU's vector
// length), for tests that call the kernel's pieces directly; Isa::automatic: the dispatch's.
const FastKernels& fast_kernels(Isa isa);

// The work items of a forward of B·Hkv kv heads with `lanes` query lanes each (group·Nq) over Nk
// keys: lane tiles times key splits (api.cpp's split-KV rule), as sdpa::forward makes them.
i64 forward_items(i64 B, i64 Hkv, i64 lanes, i64 Nk);
// The longest head piece (a kv head's rows of one block, in bytes) of a heads-major paged cache
// that the decoding loop reads several heads at a time (api.cpp, item_heads): by the CPU's vendor.
i64 short_piece_bytes();

// Bytes the strided-input copies (api.cpp, TightCopies) have allocated in this process, and
// the most one call's copies may take (512 MiB); the setter is for tests, which lower the cap
// to show a call above it reads its inputs in place, with the same bits.
i64 strided_copy_bytes();
i64 strided_copy_limit_bytes();
void set_strided_copy_limit_bytes(i64 bytes);
// For tests: while set (not null), sdpa::forward and sdpa::backward run this table whatever
// the ISA (the kernel tests' W = 16 build on AVX2, tests/kernel/fast_w16_on_avx2.cpp).
void set_kernels_for_tests(const FastKernels* kernels);

const FastKernels& fast_kernels_scalar();
const FastKernels& fast_kernels_avx2();
const FastKernels& fast_kernels_avx512();
const FastKernels& fast_kernels_neon();
const FastKernels& fast_kernels_sve256();  // SVE at 256 and at 512 bits: per_isa() takes the CPU's
const FastKernels& fast_kernels_sve512();
// The AVX-512 table whose bf16 tiled forward and backward run on AMX-BF16 tiles; api.cpp hands
// it out where the dispatch chose Engine16::amx (sdpa/dispatch.hpp).
const FastKernels& fast_kernels_avx512_amx();
// The AVX-512 table whose bf16 tiled forward and backward run on vdpbf16ps (fp16 widened), for
// CPUs with AVX512_BF16 and no AMX: api.cpp hands it out where the dispatch chose Engine16::dot.
const FastKernels& fast_kernels_avx512_dot();
// The neon table whose bf16 tiled forward and backward run on BFDOT (fp16 widened), for aarch64
// CPUs with BF16: api.cpp hands it out where the dispatch chose Engine16::dot for the neon path.
const FastKernels& fast_kernels_neon_dot();

}  // namespace sdpa::detail
