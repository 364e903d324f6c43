// flops.hpp — the one FLOP count (and byte count) every sdpa benchmark reports against.
//
// FlashAttention's convention, said precisely for any shape. Per query head, the forward
// is two matrix products over the (query, key) pairs it keeps: S = Q·Kᵀ costs 2·Dk FLOPs
// per pair, O = P·V costs 2·Dv, so
//
//   forward  = 2·(Dk + Dv) · B·Hq · visible_pairs     (= 4·B·H·N²·D when Nq = Nk, Dk = Dv)
//   backward = 2.5 × forward
//
// visible_pairs is Nq·Nk without a mask. With a causal mask it is the area of the visible
// part of the Nq × Nk score rectangle (the region j ≤ i + offset, offset 0 for top-left and
// Nk − Nq for bottom-right, measured as an area, not a count of lattice points): N²/2 when
// Nq = Nk — FlashAttention's "halved for causal" — and for Nq ≠ Nk the part a causal
// kernel must compute, e.g. top-left Nq ≤ Nk: Nq²/2; bottom-right Nq ≤ Nk: Nq·Nk − Nq²/2.
// Softmax, scaling and masking are not counted (they are O(Nq·Nk), not O(Nq·Nk·D)); nor are
// heads sharing K and V (GQA) discounted: every query head does its own products.
// The backward's 2.5 is the convention's ratio of five products to two; it is exact for
// Dk = Dv (for Dk ≠ Dv the five products cost 3·Dk + 2·Dv per pair, not 2.5·(Dk + Dv)).
//
// An explicit key-padding mask (ExplicitMask::padding, `sdpa bench --mask padding`) keeps
// fewer pairs: batch item b's first p_b keys are hidden, so its rows see the keys
// j ∈ [p_b, …) the causal mask lets through — measured as an area again, the same count for
// the shape with Nk − p_b keys (and Nq − p_b rows for top-left, whose first p_b rows see
// nothing). visible_pairs is then the mean over the batch items, so the formulas above hold.
//
// Decoding rows (Nq ≤ 16) are bound by memory, not FLOPs: they read K and V once,
// kv_bytes = size·B·Hkv·Nk·(Dk + Dv) bytes, size 4 for fp32 and 2 for bf16/fp16.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "sdpa/sdpa.hpp"

namespace sdpa::bench {

using i64 = std::int64_t;

/// One attention problem's sizes: Q (B, Hq, Nq, Dk), K (B, Hkv, Nk, Dk), V (B, Hkv, Nk, Dv).
struct Shape {
  i64 B = 1, Hq = 8, Hkv = 8, Nq = 1024, Nk = 1024, Dk = 64, Dv = 64;
};
/// The shape as the JSON of `sdpa bench` and `sdpa check` names it: batch, heads, kv_heads,
/// seq, kv_seq, dim, dim_v (the command-line options that set them).
nlohmann::ordered_json shape_json(const Shape& s);

enum class Pass { forward, backward };

/// An explicit mask a benchmark row passes besides (or, holding it, instead of) the causal
/// one: none, or key padding (see padded_keys).
enum class ExplicitMask { none, padding };

/// ExplicitMask::padding: batch item b's first ⌊b·Nk / (2B)⌋ keys are padding (left padding,
/// as a tokenizer pads a batch for generation): shares 0, 1/8, 1/4, 3/8 of the keys for
/// B = 4, the batches of bench/mask_cost.py and bench/hf_model.py; always below half.
i64 padded_keys(const Shape& s, i64 b);

/// "none" or "padding", as `sdpa bench --mask` takes them and its JSON names them.
const char* mask_name(ExplicitMask m);
/// The inverse of mask_name; anything else throws sdpa::Error naming `what` (the option).
ExplicitMask parse_explicit_mask(const std::string& name, const char* what);

/// (query, key) pairs per head the FLOP count charges for (see above); with a padding mask
/// the mean over the batch items.
double visible_pairs(const Shape& s, Causal causal, ExplicitMask mask = ExplicitMask::none);

/// FLOPs of one call: the count above.
double flops(const Shape& s, Causal causal, Pass pass, ExplicitMask mask = ExplicitMask::none);

/// Bytes of K and V in dtype t, what a decoding call must read at least once.
double kv_bytes(const Shape& s, Dtype t = Dtype::f32);

/// A decoding shape: so few query rows that reading K and V bounds the time.
bool is_decoding(const Shape& s);

}  // namespace sdpa::bench
