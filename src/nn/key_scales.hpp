// nn/key_scales.hpp — which scales keep an 8-bit key cache closer to the float keys, measured
// on the keys a trained text model computes: the library behind `sdpa key-scales`.
//
// sdpa's QuantizedKvCache stores one scale per key (position) and kv head: the key's largest
// |element| sets its step. The other layout serving engines offer for K is one scale per
// channel over a group of positions (KIVI; OpenVINO's per-channel K): a channel's largest
// |value| in the group sets its step, so a few channels much larger than the rest ("outlier
// channels") no longer coarsen every other channel's step. Which wins depends on the keys'
// statistics, so it is measured on keys of a model trained on real text, through the
// library's own quantizer (sdpa::quantize_kv: a per-channel group is quantized as the
// transposed block, one row per channel) and the fp64 reference attention.
//
// Per head and scheme, over held-out contexts of the model's length T:
//   key error    ‖K̂ − K‖ / ‖K‖ (Frobenius, all keys of the head)
//   score error  rms of β·q_i·(k̂_j − k_j) over the causal pairs j ≤ i: the logit error
//   out error    ‖Ô − O‖ / ‖O‖, O and Ô the head's causal attention (fp64 reference) with K
//                and with K̂, the same q and v: what the model reads
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/train.hpp"
#include "sdpa/kvcache.hpp"

namespace sdpa::nn {

struct KeyScalesConfig {
  std::string corpus;                        // the checkpoint's corpus ("" = the default); its hash must match
  std::string set = "validation";            // held-out part: validation | test
  i64 contexts = 64;                         // evenly spaced contexts of the model's length
  std::vector<i64> groups{16, 32, 64, 128};  // positions sharing a channel's scale (capped at the context)
  int threads = 0;                           // the model's forward (0: all)
};

/// One head's keys under one scheme. scales: "position" or "channel/G".
struct KeyScalesRow {
  i64 layer = 0, head = 0;
  std::string format, scales;
  double scale_bytes = 0;  // bytes of scales per key and head (fp32 scales)
  double key_error = 0, score_error = 0, out_error = 0;
};

/// What the float keys of one head look like.
struct KeyScalesHead {
  i64 layer = 0, head = 0;
  double beta = 0;
  double score_rms = 0;       // rms of β·q_i·k_j over the causal pairs
  double channel_spread = 0;  // largest channel rms / median channel rms, over all keys
  double row_spread = 0;      // largest key's ‖k‖∞ / median key's ‖k‖∞
};

struct KeyScalesResult {
  i64 layers = 0, heads = 0, d_head = 0, seq = 0, contexts = 0;
  std::vector<KeyScalesHead> head_stats;  // (L·H), layer-major
  std::vector<KeyScalesRow> rows;         // per head: each format, then each scheme
};

/// keys (N, D), row stride ldk, quantized with one scale per row and dequantized into out (N, D).
void dequantized_per_position(const float* keys, i64 N, i64 D, i64 ldk, KvQuant quant, float* out);
/// keys (N, D) quantized with one scale per channel over each run of `group` consecutive rows
/// (the last run may be shorter) and dequantized into out (N, D). group >= 1.
void dequantized_per_channel(const float* keys, i64 N, i64 D, i64 ldk, i64 group, KvQuant quant, float* out);

/// Runs the checkpoint's model on held-out contexts of its corpus and measures every head's
/// keys under each format (int8, fp8_e4m3) and scheme (per position, per channel in each
/// group). Throws sdpa::Error for a checkpoint that is not the text task's, a corpus whose
/// hash is not the checkpoint's, or bad settings (named).
KeyScalesResult key_scales(const Checkpoint& checkpoint, const KeyScalesConfig& config);

/// The result as one JSON document: the shape, `set`, and per head its statistics
/// (`head_stats`) and each scheme's row (`rows`), the fields named as in the structs above.
nlohmann::ordered_json to_json(const KeyScalesResult& result, const std::string& set);

/// The result as a printable table: per layer, format and scheme the errors' means over the
/// layer's heads, then per format and scheme over all heads the geometric mean of out error ÷
/// the per-position out error and the heads where the scheme's out error is lower.
std::string key_scales_table(const KeyScalesResult& result);

}  // namespace sdpa::nn
