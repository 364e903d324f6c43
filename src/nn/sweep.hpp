// nn/sweep.hpp — a grid of training runs (policy x head size x seed), the statistics over
// seeds and the seed note's ensemble rule: the library behind `sdpa sweep` and
// sdpa.train.sweep. Runs train in this process through nn::train.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/sample.hpp"
#include "nn/train.hpp"

namespace sdpa::nn {

struct SweepSpec {
  TrainConfig base;  // shared settings; policy, d_model, heads, init, lr and seed are set per run
  std::vector<std::string> policies;
  std::vector<std::uint64_t> seeds;
  std::vector<i64> d_heads;        // head sizes; 0: one head as wide as the model (d_k = d_model)
  std::vector<i64> widths;         // d_model values (empty: base.d_model)
  std::vector<std::string> inits;  // initialisations (empty: base.init)
  std::vector<double> lrs;         // peak learning rates (empty: base.lr)
  bool ensemble = true;            // evaluate the ensemble rule when "adaptive" is among the policies
  int jobs = 0;                    // runs trained at once (0: min(2, cores)); the results do not depend on it
  /// Where every finished run is stored as it finishes (one JSON file each, written
  /// atomically; adaptive runs also their final state, for the ensemble rule), and where a
  /// re-run finds the runs it need not train again. Empty: nothing stored.
  std::string store;
  /// Wall-clock limit in seconds for the training (0: none): the grid is cut to fit an
  /// estimate measured at the start, and the cuts are stated (SweepResult::cuts).
  double budget_s = 0;
  /// Text task: one generated sample per policy, from the final state of the policy's first
  /// run in grid order (first group, first seed), kept in the store as a checkpoint beside
  /// the run. Fixed prompt, temperature and seed, so policies are compared on equal terms;
  /// an empty prompt: no samples. validate() refuses a prompt outside the corpus's alphabet.
  SampleConfig sample{"ROMEO:", 200, 0.8, 1};

  /// The sweep's grid (docs/training.md): sort at width 64, where every policy learns in a
  /// few hundred steps, 8 policies x d_k {8, 32} x seeds {1, 2, 3}; not `sdpa train`'s mqar
  /// defaults, whose single wide head leaves no head size to sweep.
  static SweepSpec defaults();
};

/// One trained run: where it sits in the grid, its logged steps and its summary.
struct SweepRun {
  std::string policy;
  i64 d_head = 0;  // d_k (a d_head of 0 in the spec becomes d_model here)
  std::uint64_t seed = 0;
  i64 d_model = 0;
  std::string init;
  double lr = 0;
  std::vector<StepRecord> log;
  TrainSummary summary;
  bool from_store = false;  // loaded from SweepSpec::store, not trained by this call
  /// The configuration group: runs that differ only in policy and seed.
  std::string group() const;
};

/// Mean and sample standard deviation over the runs that did not diverge; sd is NaN for
/// fewer than two values, both are NaN for none. ci95: the half-width of the 95 % Student-t
/// interval of the mean, t(0.975, n-1) · sd / √n (NaN for n < 2).
struct Spread {
  double mean = 0, sd = 0;
  i64 n = 0;
  double ci95 = NAN;
};
Spread spread(const std::vector<double>& values);

/// One (group, policy) cell of the summary table.
struct SweepCell {
  std::string policy;
  i64 d_head = 0;
  i64 d_model = 0;
  std::string init;
  double lr = 0;
  i64 runs = 0, diverged = 0, reached = 0;  // reached: runs whose held-out accuracy met the threshold
  Spread eval_loss, eval_accuracy, long_accuracy;
  /// Held-out loss minus that of inv_sqrt_dk in the same group with the same seed (so the
  /// same initialisation stream and data order), over the seeds where neither diverged:
  /// a paired comparison. n = 0 when inv_sqrt_dk is not swept (or for itself).
  Spread paired_difference;
  /// Learning-rate sweeps: whether this cell's lr gives its policy the lowest mean held-out
  /// loss among the lrs of the same width, head size and initialisation, and its held-out
  /// loss minus that best lr's with the same seed (n = 0 for the best lr itself, or with one lr).
  /// Only lrs where no seed diverged can be best.
  bool best_lr = false;
  Spread vs_best_lr;
  double steps_to_threshold_mean = 0;  // over the runs that reached it (NaN: none)
  double beta_mean = 0;                // the final β averaged over heads and runs
};

/// The ensemble rule (the seed note): every adaptive run of a group is scored on the
/// test set with its own β and with the final β of the adaptive run that did best on the
/// validation set.
struct EnsembleRow {
  i64 d_head = 0;
  std::uint64_t seed = 0, best_seed = 0;
  std::vector<double> own_beta, ensemble_beta;  // (L, H)
  double own_test_loss = 0, own_test_accuracy = 0, ensemble_test_loss = 0, ensemble_test_accuracy = 0;
  std::string group;
  i64 heads = 0;
};

/// A policy's sample (SweepSpec::sample): which run's final model wrote it, and the text
/// (the prompt and its continuation).
struct SweepSample {
  std::string policy, group;
  std::uint64_t seed = 0;
  std::string text;
};

struct SweepResult {
  SweepSpec spec;             // as run: after --budget's cuts
  int jobs = 0, threads = 0;  // as run (per process)
  int ranks = 1;              // processes the runs were spread over (SweepShare)
  /// false on a process of a shared sweep other than rank 0: `runs` then holds only the
  /// runs this process trained or loaded (the others are default), and nothing else is set.
  bool complete = true;
  std::vector<SweepRun> runs;  // in grid order: width, d_head, init, lr, then policy, then seed
  std::vector<SweepCell> summary;
  std::vector<EnsembleRow> ensemble;
  std::vector<SweepSample> samples;  // text task: one per policy whose sampled run did not diverge
  std::vector<std::string> cuts;     // what --budget removed, in words (empty: nothing)
  double estimate_s = NAN;           // --budget's estimate of the training time of what was kept
  double seconds = 0, train_seconds = 0;
};

/// What a sweep reports while it runs: after every training step of any run (step > 0)
/// and after every finished run (finished = true). Calls come one at a time.
struct SweepStatus {
  std::string stage;              // "training" or "ensemble evaluation"
  std::size_t done = 0;           // runs finished (those loaded from the store included)
  std::size_t total = 0;          // runs in this stage
  std::size_t stored = 0;         // of those, loaded from the store
  bool finished = false;          // a run just finished (run names it)
  const SweepRun* run = nullptr;  // the run finished or stepping
  i64 step = 0, steps = 0;        // the stepping run's step, of its steps
  double elapsed_s = 0;           // since the stage began
  double eta_s = NAN;             // the stage's remaining time at the rate so far (NaN: no rate yet)
};
using SweepProgress = std::function<void(const SweepStatus&)>;

/// A sweep spread over several processes (`mpirun -np P sdpa sweep`): process `rank`
/// trains the runs whose grid index is rank mod `ranks` (and loads those of them already
/// in the store), then rank 0 receives every process's runs and computes the summary and
/// the ensemble rule alone. Each run's bits depend on neither the process nor its thread
/// count, so the result equals one process's. The transport is the caller's:
/// src/distributed/sweep_share.hpp gives these hooks over MPI, so sdpa_nn needs no MPI.
struct SweepShare {
  int rank = 0, ranks = 1;
  int ranks_on_node = 1;  // processes sharing this machine's cores: each takes its part of them
  /// Collective: throws the same sdpa::Error on every process unless all pass the same text
  /// (what = what it is, for the message).
  std::function<void(const std::string& what, const std::string& text)> agree;
  /// Collective: every process passes its finished runs (as the store writes them); rank 0
  /// receives all of them, in rank order, and the others an empty list.
  std::function<std::vector<std::string>(const std::vector<std::string>& mine)> gather;
};

/// How many runs the spec's grid holds (a d_head of 0 that equals a named head size at
/// some width is one run there, not two).
std::size_t grid_size(const SweepSpec& spec);

/// Throws sdpa::Error naming the option when the spec cannot run (sweep() calls it first).
void validate(const SweepSpec& spec);

/// Validates the spec, fits it to the budget, loads the runs already in the store, trains
/// the others (storing each as it finishes), computes the summary and the ensemble rule.
/// A run that throws stops the sweep: the error names it; the runs stored so far stay.
/// With a SweepShare of several ranks, this process does its part (see SweepShare).
SweepResult sweep(const SweepSpec& spec, const SweepProgress& progress = {}, const SweepShare& share = {});

/// The summary as the aligned text table `sdpa sweep` prints.
std::string summary_table(const SweepResult& r);

/// sweep.json: the configuration, the table, the summary, the ensemble rows and every
/// run's log (each log row as `sdpa train` prints it).
nlohmann::ordered_json to_json(const SweepResult& r);

}  // namespace sdpa::nn
