// nn/train.hpp — the training loop behind `sdpa train`: a model, a task, AdamW,
// JSON lines out, checkpoints in and out.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  std::string corpus;  // text: a UTF-8 file ("" = the default Shakespeare corpus, nn/text.hpp)
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
  /// the stopping point may differ). For text it ends with the corpus's hash and alphabet
  /// (as alphabet_hex), which is what `sdpa sample` decodes with.
  std::string identity(const Task& task) const;
};

/// One logged step: what `sdpa train` prints as a JSON line. Per-head fields are (L, H)
/// row-major, per-layer fields (L). A step that diverged carries only `step`, `loss` (NaN
/// when the loss itself was not finite), `grad_norm` (NaN) and `diverged`.
struct StepRecord {
  i64 step = 0;
  bool diverged = false;
  double loss = 0, accuracy = 0, eval_loss = 0, eval_accuracy = 0;
  std::optional<double> eval_bits_per_char;  // text only: eval_loss / ln 2
  std::optional<double> eval_long_accuracy;  // lengthgen only: held-out accuracy at twice the length
  double lr = 0;
  std::vector<double> beta, sigma_wq, sigma_wk, score_std, entropy, max_weight;     // (L, H)
  std::vector<double> sigma_x, grad_norm_q, grad_norm_k, grad_norm_v, grad_norm_o;  // (L)
  double grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
};

/// The closing summary of a run: its description and its final figures.
struct TrainSummary {
  std::string task, policy;  // policy as parsed (its canonical name)
  std::uint64_t seed = 0;
  i64 d_model = 0, heads = 0, layers = 0, seq = 0;
  i64 steps_done = 0;
  double threshold = 0;
  double loss = 0, accuracy = 0, eval_loss = 0, eval_accuracy = 0;
  std::optional<double> eval_bits_per_char;  // text only: eval_loss / ln 2
  std::optional<double> eval_long_accuracy;  // lengthgen only
  i64 steps_to_threshold = -1;               // -1: never reached
  bool diverged = false;
  double tokens_per_s = 0, seconds = 0;
  std::vector<double> beta;  // final (L, H)
};

// JSON objects, one place for every front end: `sdpa train`'s lines, sweep.json, Python.
// Non-finite numbers become null.
nlohmann::ordered_json to_json(const StepRecord& r, i64 heads);
nlohmann::ordered_json to_json(const TrainSummary& s);  // with "final": true, as `sdpa train` prints it
/// A per-head list (L, H) row-major as [[h0, h1, ...], ...], non-finite values as null.
nlohmann::ordered_json per_head_json(const std::vector<double>& v, i64 heads);
/// The inverses of to_json, for the sweep's stored runs: every number comes back with the
/// same bits (JSON numbers round-trip; null becomes NaN), except tokens_per_s, which to_json
/// rounds. Throws sdpa::Error naming `what` for a malformed object.
StepRecord step_record_from_json(const nlohmann::ordered_json& j, const std::string& what);
TrainSummary train_summary_from_json(const nlohmann::ordered_json& j, const std::string& what);

struct Checkpoint;

/// What a caller may attach to a run besides its configuration.
struct TrainHooks {
  std::function<void(const StepRecord&)> on_log;       // every logged step
  std::function<void(i64 step, double loss)> on_step;  // every step (progress)
  const Checkpoint* resume = nullptr;                  // start from this state (instead of TrainConfig::resume's file)
  Checkpoint* final_state = nullptr;                   // receives the state at the end (as --save would write it)
};

/// Trains (or, with eval_only, evaluates) one model. Throws sdpa::Error for bad
/// configuration or a bad checkpoint.
TrainSummary train(const TrainConfig& cfg, const TrainHooks& hooks = {});

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
