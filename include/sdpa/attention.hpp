// sdpa/attention.hpp — exact scaled dot-product attention, forward and backward.
//
//   s_ij = β · (q_i · k_j)                    β = 1/√Dk unless Options::scale is set
//   s_ij = c · tanh(s_ij / c)                 only with Options::softcap = c
//   s_ij = s_ij + mask_ij, or −∞ where masked (causal, window, keep-mask, mask = −∞)
//   out_i = Σ_j softmax_j(s_i·) · v_j         lse_i = log Σ_j exp(s_ij)
//   with Options::dropout: out_i = Σ_j softmax_j(s_i·) · keep_ij / (1 - p) · v_j (lse unchanged)
//   with Options::sinks:   lse_i = log(exp(sink_h) + Σ_j exp(s_ij)), out_i = Σ_j exp(s_ij − lse_i) · v_j
//                          (a virtual key per head that takes part in the softmax and has no value)
//
// Shapes (letters used throughout the project):
//   q    (B, Hq,  Nq, Dk)        out  (B, Hq, Nq, Dv)
//   k    (B, Hkv, Nk, Dk)        lse  (B, Hq, Nq)
//   v    (B, Hkv, Nk, Dv)        mask (B|1, Hq|1, Nq|1, Nk|1)  broadcast
// Query head h reads kv head h / (Hq / Hkv): GQA, and MQA when Hkv = 1.
//
// The full contract, with the mask alignments spelled out, is docs/contract.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sdpa/dispatch.hpp"
#include "sdpa/error.hpp"
#include "sdpa/half.hpp"
#include "sdpa/philox.hpp"
#include "sdpa/tensor.hpp"

namespace sdpa {

/// Which diagonal a causal mask follows when Nq != Nk.
///   top_left:     key j visible to query i iff j <= i            (PyTorch's is_causal)
///   bottom_right: key j visible to query i iff j <= i + Nk - Nq  (KV cache, FlashAttention >= 2.1)
enum class Causal { none, top_left, bottom_right };

/// Which implementation runs.
///   fast:      tiled online-softmax fp32 kernel, O(block) scratch, multi-threaded.
///   reference: fp64 accumulation over the materialised score matrix; the oracle.
enum class Kernel { fast, reference };

/// Sliding window around the diagonal d_i of query i (the causal diagonal when
/// Options::causal is set, else the bottom-right one): key j is visible iff
/// d_i - left <= j <= d_i + right. -1 means unbounded on that side.
struct Window {
  std::int64_t left = -1;
  std::int64_t right = -1;
};

struct Plan;

struct Options {
  std::optional<double> scale;    // β, any finite value; default 1/√Dk
  std::optional<double> softcap;  // c > 0: scores become c·tanh(s/c)
  Causal causal = Causal::none;
  // The diagonal d_i = i + diagonal that the causal mask and the window follow, replacing
  // the alignment's own (0 for top_left, Nk - Nq otherwise). Set for a block of a longer
  // sequence (queries from q0, keys from k0): diagonal = q0 - k0 + the sequence's own.
  // |diagonal| <= 2^62. See sdpa/blocks.hpp.
  std::optional<std::int64_t> diagonal;
  Window window{};
  View4<const float> mask{};         // additive float mask; empty = none
  View4<const std::uint8_t> keep{};  // boolean keep-mask (nonzero keeps); empty = none
  int threads = 0;                   // 0: all available (OpenMP's default)
  Kernel kernel = Kernel::fast;
  Isa isa = Isa::automatic;
  Dropout dropout{};  // p > 0: attention dropout (sdpa/philox.hpp; docs/contract.md, "Dropout")
  // Attention sinks (gpt-oss): one logit per query head, shape (Hq), in the units of the
  // scores s_ij (after β, soft-cap and mask); each finite, or −∞ for no sink on that head.
  // Never dropped; a row whose keys are all masked puts its weight on the sink: out 0,
  // lse = sink_h. Empty = none.
  View1<const float> sinks{};
  // Backward only, with sinks: ∂L/∂sinks, shape (Hq), written (=) here (−Σ over the head's
  // rows of exp(sink_h − lse_i)·Σ_e dout_ie·out_ie); empty = not computed.
  View1<float> dsinks{};
  Plan* plan = nullptr;  // when set, the call writes what it ran there (sdpa::Plan)
};

/// What one call ran, and why. A call whose Options::plan is set overwrites it; with the
/// environment variable SDPA_LOG=1 every call also prints plan.summary() to stderr, one line
/// (read once per process). The counts are the call's own, recorded as it runs, so they
/// cannot drift from what the kernel did.
struct Plan {
  std::string call;  // "forward", "backward", "forward_varlen", "backward_varlen", "forward_kvcache"
  Kernel kernel = Kernel::fast;
  Dtype dtype = Dtype::f32;
  Isa isa = Isa::scalar;                // the path that ran (the fast kernel's)
  Engine16 engine = Engine16::widened;  // what ran its 16-bit products; widened for fp32
  std::string why;                      // the dispatch's reasons for the ISA and the engine
  int threads = 0;                      // workers of the call's main loop (the most over its sequences)
  std::int64_t sequences = 1;           // varlen, KV cache: the sequences run (their items in one pool
                                        // where the KV cache's decoding loop takes them)
  // The forward's work items and the loop each took (forward.inl's one choice):
  std::int64_t kv_splits = 0;       // key splits per query tile (> 1: split-KV, merged by lse)
  std::int64_t decoding_items = 0;  // the fused decoding loop (one to eight query lanes)
  std::int64_t few_lane_items = 0;  // few lanes where the decoding loop does not apply
  std::int64_t tiled_items = 0;     // the fp32 tile loop (16-bit inputs widened on load)
  std::int64_t engine_items = 0;    // the tile loop with its products on `engine`
  // The most kv heads one forward item took together: > 1 where the decoding loop read a tokens-major
  // (B, N, Hkv, D) cache's heads, or a heads-major paged cache's short blocks, tile by tile in one item
  // (each head's bits are its own item's).
  std::int64_t heads_per_item = 0;
  // The backward's schedule: one pass per (batch, kv head) item, or pass A (dk, dv per key
  // tile) then pass B (dq per query tile); both give the same bits. A backward's engine_items
  // counts its items whose products ran on `engine`.
  bool one_pass = false;
  std::int64_t backward_items = 0;
  std::int64_t strided_copies = 0;   // inputs whose far-apart rows were copied back to back once
  std::int64_t packed_operands = 0;  // K or V packed once per call for the 16-bit engine
  // forward_kvcache (sdpa/kvcache.hpp) over a paged cache: the sequences whose blocks the kernel
  // read in place (the decoding loop's; a quantized cache's always); the others' were gathered into
  // one contiguous copy first.
  std::int64_t paged_sequences = 0;
  // forward_kvcache over a quantized cache: the sequences whose codes the kernel read in place (all
  // with the fast kernel; the reference kernel dequantizes into a float copy first).
  std::int64_t quantized_sequences = 0;
  /// One line: the call, dtype, ISA, engine, loops and schedule, and the reasons.
  std::string summary() const;
};

/// Forward pass. Writes out, and lse when lse is non-empty.
/// A query that sees no key gets out = 0 and lse = -inf.
void forward(View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out, View3<float> lse,
             const Options& opt = {});

/// Backward pass: dq, dk, dv from dout, recomputing the probabilities from lse.
/// out and lse must be those the forward produced with the same options.
/// Overwrites dq, dk, dv (`=`, not `+=`). Deterministic: the same bits for any
/// thread count.
void backward(View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
              View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk, View4<float> dv,
              const Options& opt = {});

/// The same in bf16 or fp16, one dtype per call: q, k, v, out (and dout, dq, dk, dv) in the
/// dtype, lse in fp32. The arithmetic is fp32 (inputs widened on load, products accumulated in
/// fp32, P kept in fp32), each output rounded once, to nearest even, on store.
void forward(View4<const bf16> q, View4<const bf16> k, View4<const bf16> v, View4<bf16> out, View3<float> lse,
             const Options& opt = {});
void forward(View4<const fp16> q, View4<const fp16> k, View4<const fp16> v, View4<fp16> out, View3<float> lse,
             const Options& opt = {});
void backward(View4<const bf16> q, View4<const bf16> k, View4<const bf16> v, View4<const bf16> out,
              View3<const float> lse, View4<const bf16> dout, View4<bf16> dq, View4<bf16> dk, View4<bf16> dv,
              const Options& opt = {});
void backward(View4<const fp16> q, View4<const fp16> k, View4<const fp16> v, View4<const fp16> out,
              View3<const float> lse, View4<const fp16> dout, View4<fp16> dq, View4<fp16> dk, View4<fp16> dv,
              const Options& opt = {});

/// Packed variable-length batches (FlashAttention's varlen convention). Sequence s holds the
/// query rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and key rows [cu_seqlens_k[s], cu_seqlens_k[s+1])
/// of tensors that keep the sequences back to back:
///   q    (Tq, Hq,  Dk)        out  (Tq, Hq, Dv)
///   k    (Tk, Hkv, Dk)        lse  (Hq, Tq)
///   v    (Tk, Hkv, Dv)        cu_seqlens_q, cu_seqlens_k  (batch + 1), int32 or int64
/// Each sequence attends only within itself, as its own (1, H, L, D) call of forward/backward
/// with the same options: causal alignment and window per sequence, no padding work. The
/// offsets start at 0, never decrease and end at Tq (Tk). A sequence with no keys gets out = 0,
/// lse = -inf.
/// Explicit masks (Options::mask additive, Options::keep boolean) are the packed batch's, as
/// 4-d views (1, Hq|1, Tq|1, Tk|1): each of the last three dimensions 1 (broadcast) or full, the
/// first always 1. Sequence s reads rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and columns
/// [cu_seqlens_k[s], cu_seqlens_k[s+1]) of it (a view, no copy), so a key-padding mask
/// (1, 1, 1, Tk) costs O(Tk) and a per-head bias (1, Hq, Tq, Tk) O(Hq·Tq·Tk); entries outside
/// every sequence's block are never read. Any other shape throws sdpa::Error naming the mask.
struct SeqOffsets {
  View<const std::int32_t, 1> i32{};
  View<const std::int64_t, 1> i64{};
  SeqOffsets(View<const std::int32_t, 1> v) : i32(v) {}  // NOLINT: either dtype converts
  SeqOffsets(View<const std::int64_t, 1> v) : i64(v) {}  // NOLINT
  std::int64_t size() const { return i32.data ? i32.shape[0] : i64.shape[0]; }
  std::int64_t operator[](std::int64_t s) const { return i32.data ? i32(s) : i64(s); }
};

void forward_varlen(View3<const float> q, View3<const float> k, View3<const float> v, SeqOffsets cu_seqlens_q,
                    SeqOffsets cu_seqlens_k, View3<float> out, View<float, 2> lse, const Options& opt = {});
/// The same in bf16 or fp16 (q, k, v, out; lse fp32), as forward's 16-bit overloads.
void forward_varlen(View3<const bf16> q, View3<const bf16> k, View3<const bf16> v, SeqOffsets cu_seqlens_q,
                    SeqOffsets cu_seqlens_k, View3<bf16> out, View<float, 2> lse, const Options& opt = {});
void forward_varlen(View3<const fp16> q, View3<const fp16> k, View3<const fp16> v, SeqOffsets cu_seqlens_q,
                    SeqOffsets cu_seqlens_k, View3<fp16> out, View<float, 2> lse, const Options& opt = {});

/// Backward of forward_varlen: dq (Tq, Hq, Dk), dk (Tk, Hkv, Dk), dv (Tk, Hkv, Dv), overwritten.
/// Deterministic, as backward is.
void backward_varlen(View3<const float> q, View3<const float> k, View3<const float> v, SeqOffsets cu_seqlens_q,
                     SeqOffsets cu_seqlens_k, View3<const float> out, View<const float, 2> lse, View3<const float> dout,
                     View3<float> dq, View3<float> dk, View3<float> dv, const Options& opt = {});
void backward_varlen(View3<const bf16> q, View3<const bf16> k, View3<const bf16> v, SeqOffsets cu_seqlens_q,
                     SeqOffsets cu_seqlens_k, View3<const bf16> out, View<const float, 2> lse, View3<const bf16> dout,
                     View3<bf16> dq, View3<bf16> dk, View3<bf16> dv, const Options& opt = {});
void backward_varlen(View3<const fp16> q, View3<const fp16> k, View3<const fp16> v, SeqOffsets cu_seqlens_q,
                     SeqOffsets cu_seqlens_k, View3<const fp16> out, View<const float, 2> lse, View3<const fp16> dout,
                     View3<fp16> dq, View3<fp16> dk, View3<fp16> dv, const Options& opt = {});

/// β for these options and key width: opt.scale, or 1/√dk.
double resolve_scale(const Options& opt, std::int64_t dk);

/// The buffers calls keep between calls: every buffer a call allocates for itself (the workers'
/// scratch, strided copies, operands packed once per call) comes from one process-wide pool and
/// goes back to it when the call returns, so the next call of that shape reuses it instead of
/// faulting fresh pages in (docs/design.md, "A call's buffers kept between calls").
struct BufferPoolBytes {
  std::int64_t held = 0;  // all the pool's blocks, those running calls hold included
  std::int64_t busy = 0;  // the blocks running calls hold now
};
/// What the pool holds now.
BufferPoolBytes buffer_pool_bytes();
/// Hands every block no running call holds back to the system and returns their bytes: for a
/// process that ran one large call and wants its memory back. Safe while other threads run calls
/// (a block in use stays, and goes back to the pool when its call returns); the next call of a
/// shape allocates its buffers afresh, then keeps them again. No result changes.
std::int64_t release_buffers();

}  // namespace sdpa
