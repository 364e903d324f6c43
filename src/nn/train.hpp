// nn/train.hpp — the training loop behind `sdpa train`: a model, a task, AdamW,
// JSON lines out, checkpoints in and out.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/model.hpp"
#include "nn/tasks.hpp"

namespace sdpa::nn {

// The defaults learn mqar (4 pairs, 8 queries) to > 0.95 held-out accuracy in 300-400 steps
// (docs/training.md, "mqar"): one head as wide as the model and lr 1e-3. With 4 heads of 16,
// or width 64, or lr 3e-3, the model stays on the "one of the values" plateau for
// thousands of steps. `sdpa sweep` keeps its own defaults (sort, width 64; cmd_sweep.cpp).
struct TrainConfig {
  std::string task = "mqar";
  std::string policy = "inv_sqrt_dk";
  std::string init = "xavier";
  i64 d_model = 128, heads = 1, layers = 2, seq = 16, batch = 32, steps = 1000, warmup = 100;
  double lr = 1e-3, weight_decay = 0.1, clip = 1.0;
  std::uint64_t seed = 1;
  int threads = 0;  // 0: all available (OpenMP's default); any count gives the same bits
  i64 log_every = 25;
  i64 eval_size = 256;     // held-out sequences
  double threshold = 0.9;  // held-out accuracy that counts as "learned" (steps_to_threshold)
  std::string save, resume;
  i64 save_every = 0;                              // also write --save every N steps
  i64 stop_at = 0;                                 // stop after this step as if interrupted (0: run to --steps)
  std::optional<std::vector<double>> frozen_beta;  // evaluate/train with these β (L·H)
  bool eval_only = false;                          // only evaluate (after --resume)
  std::string eval_set = "validation";             // validation | test: two held-out sets

  /// The fields a checkpoint must agree on, as "key=value;..." (threads, logging and
  /// the stopping point may differ).
  std::string identity() const;
};

struct TrainSummary {
  i64 steps_done = 0;
  double loss = 0, accuracy = 0, eval_loss = 0, eval_accuracy = 0, eval_long_accuracy = -1;
  i64 steps_to_threshold = -1;
  bool diverged = false;
  double tokens_per_s = 0, seconds = 0;
  std::vector<double> beta;  // final (L, H)
};

/// Trains; calls `line` with one JSON object (no newline) per logged step and a final
/// summary object. Throws sdpa::Error for bad configuration or a bad checkpoint.
TrainSummary train(const TrainConfig& cfg, const std::function<void(const std::string&)>& line,
                   const std::function<void(i64 step, double loss)>& progress = {});

// ---- checkpoints -------------------------------------------------------------
// File: "SDPACKPT" | u32 version | u32 0 | u64 payload bytes | payload | u64 FNV-1a of payload
// Payload: u64 identity length, identity, u64 step, u64 n, params[n] m[n] v[n] (f32),
//          u64 k, score_ema[k] (f64). Little-endian, as this machine writes it.
inline constexpr std::uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  std::string identity;
  i64 step = 0;
  std::vector<float> params, m, v;
  std::vector<double> score_ema;
};

std::vector<unsigned char> encode_checkpoint(const Checkpoint& c);
/// Throws sdpa::Error naming `path` for a bad magic, version, size or checksum.
Checkpoint decode_checkpoint(const std::vector<unsigned char>& bytes, const std::string& path);
void save_checkpoint(const std::string& path, const Checkpoint& c);  // atomic (io::OutputSet)
Checkpoint load_checkpoint(const std::string& path);

}  // namespace sdpa::nn
