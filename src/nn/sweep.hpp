// nn/sweep.hpp — a grid of training runs (policy x head size x seed), the statistics over
// seeds and the seed note's ensemble rule: the library behind `sdpa sweep` and
// sdpa.train.sweep. Runs train in this process through nn::train.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/train.hpp"

namespace sdpa::nn {

struct SweepSpec {
  TrainConfig base;  // shared settings; policy, heads (= d_model / d_head) and seed are set per run
  std::vector<std::string> policies;
  std::vector<std::uint64_t> seeds;
  std::vector<i64> d_heads;
  bool ensemble = true;  // evaluate the ensemble rule when "adaptive" is among the policies
  int jobs = 0;          // runs trained at once (0: min(2, cores)); the results do not depend on it

  /// The sweep's grid (docs/training.md): sort at width 64, where every policy learns in a
  /// few hundred steps, 8 policies x d_k {8, 32} x seeds {1, 2, 3}; not `sdpa train`'s mqar
  /// defaults, whose single wide head leaves no head size to sweep.
  static SweepSpec defaults();
};

/// One trained run: its logged steps and its summary.
struct SweepRun {
  std::string policy;
  i64 d_head = 0;
  std::uint64_t seed = 0;
  std::vector<StepRecord> log;
  TrainSummary summary;
};

/// Mean and sample standard deviation over the runs that did not diverge; sd is NaN for
/// fewer than two values, both are NaN for none.
struct Spread {
  double mean = 0, sd = 0;
  i64 n = 0;
};
Spread spread(const std::vector<double>& values);

/// One (policy, d_head) cell of the summary table.
struct SweepCell {
  std::string policy;
  i64 d_head = 0;
  i64 runs = 0, diverged = 0, reached = 0;  // reached: runs whose held-out accuracy met the threshold
  Spread eval_loss, eval_accuracy, long_accuracy;
  double steps_to_threshold_mean = 0;  // over the runs that reached it (NaN: none)
  double beta_mean = 0;                // the final β averaged over heads and runs
};

/// The ensemble rule (the seed note): every adaptive run of a head size is scored on the
/// test set with its own β and with the final β of the adaptive run that did best on the
/// validation set.
struct EnsembleRow {
  i64 d_head = 0;
  std::uint64_t seed = 0, best_seed = 0;
  std::vector<double> own_beta, ensemble_beta;  // (L, H)
  double own_test_loss = 0, own_test_accuracy = 0, ensemble_test_loss = 0, ensemble_test_accuracy = 0;
};

struct SweepResult {
  SweepSpec spec;
  int jobs = 0, threads = 0;   // as run
  std::vector<SweepRun> runs;  // in grid order: d_head, then policy, then seed
  std::vector<SweepCell> summary;
  std::vector<EnsembleRow> ensemble;
  double seconds = 0, train_seconds = 0;
};

/// Called after each run: the stage ("training" or "ensemble evaluation"), runs done and
/// in all, and the run that finished. Calls come one at a time.
using SweepProgress = std::function<void(const std::string& stage, std::size_t done, std::size_t total,
                                         const std::string& policy, i64 d_head, std::uint64_t seed)>;

/// Throws sdpa::Error naming the option when the spec cannot run (sweep() calls it first).
void validate(const SweepSpec& spec);

/// Validates the spec, trains every run, computes
/// the summary and the ensemble rule. A run that throws stops the sweep: the error names it.
SweepResult sweep(const SweepSpec& spec, const SweepProgress& progress = {});

/// The summary as the aligned text table `sdpa sweep` prints.
std::string summary_table(const SweepResult& r);

/// sweep.json: the configuration, the table, the summary, the ensemble rows and every
/// run's log (each log row as `sdpa train` prints it).
nlohmann::ordered_json to_json(const SweepResult& r);

}  // namespace sdpa::nn
