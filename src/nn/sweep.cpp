// nn/sweep.cpp — see sweep.hpp.
#include "nn/sweep.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "io/json.hpp"

#include "nn/policy.hpp"
#include "nn/tasks.hpp"
#include "sdpa/version.hpp"

namespace sdpa::nn {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// One unit of work: a configuration and where its outcome goes.
struct Job {
  TrainConfig cfg;
  TrainHooks hooks;
  std::vector<StepRecord>* log = nullptr;  // logged steps, if wanted
  TrainSummary* summary = nullptr;
  std::string policy;
  i64 d_head = 0;
  std::uint64_t seed = 0;
};

// Trains the jobs, `jobs` at a time on their own threads (each run's OpenMP team is its
// own), in any order: each run's bits do not depend on threads or order. The first failure
// stops new runs from starting and is rethrown naming its run.
void run_jobs(std::vector<Job>& work, int jobs, const std::string& stage, const SweepProgress& progress) {
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex lock;
  std::exception_ptr failure;
  std::string failed_run;
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < work.size();) {
      {
        const std::lock_guard<std::mutex> g(lock);
        if (failure) return;
      }
      Job& j = work[i];
      TrainHooks hooks = j.hooks;
      if (j.log) hooks.on_log = [&j](const StepRecord& r) { j.log->push_back(r); };
      try {
        *j.summary = train(j.cfg, hooks);
      } catch (...) {
        const std::lock_guard<std::mutex> g(lock);
        if (!failure) {
          failure = std::current_exception();
          failed_run = fmt::format("{} of policy {} d_head {} seed {}", stage, j.policy, j.d_head, j.seed);
        }
        return;
      }
      const std::lock_guard<std::mutex> g(lock);
      ++done;
      if (progress) progress(stage, done, work.size(), j.policy, j.d_head, j.seed);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(jobs, static_cast<int>(work.size())); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      throw Error("sweep: " + failed_run + " failed: " + e.what());
    }
  }
}

}  // namespace

SweepSpec SweepSpec::defaults() {
  SweepSpec s;
  s.base.task = "sort";
  s.base.d_model = 64;
  s.base.lr = 3e-3;
  s.base.steps = 400;
  s.base.warmup = 50;
  s.policies = default_policies();
  s.seeds = {1, 2, 3};
  s.d_heads = {8, 32};
  return s;
}

Spread spread(const std::vector<double>& v) {
  Spread s{mean_of(v), NAN, static_cast<i64>(v.size())};
  if (v.size() >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

void validate(const SweepSpec& spec) {
  if (spec.policies.empty() || spec.seeds.empty() || spec.d_heads.empty())
    throw Error("sweep: --policies, --seeds and --d-head each need at least one value");
  for (const auto& p : spec.policies) parse_policy(p, "--policies");
  for (i64 d : spec.d_heads)
    if (d <= 0 || spec.base.d_model % d != 0)
      throw Error("--d-head: " + std::to_string(d) + " does not divide --d-model " + std::to_string(spec.base.d_model));
  parse_task(spec.base.task, spec.base.seq, spec.base.corpus);
  if (spec.jobs < 0) throw Error("--jobs: must be >= 0, got " + std::to_string(spec.jobs));
  if (spec.base.threads < 0) throw Error("--threads: must be >= 0, got " + std::to_string(spec.base.threads));
}

SweepResult sweep(const SweepSpec& spec, const SweepProgress& progress) {
  validate(spec);

  SweepResult res;
  res.spec = spec;
  const int cores = std::max(1, omp_get_num_procs());
  res.jobs = spec.jobs > 0 ? spec.jobs : std::min(2, cores);
  res.threads = spec.base.threads > 0 ? spec.base.threads : std::max(1, cores / res.jobs);
  const auto t_start = std::chrono::steady_clock::now();

  auto config = [&](const std::string& policy, i64 d_head, std::uint64_t seed) {
    TrainConfig c = spec.base;
    c.policy = policy;
    c.heads = c.d_model / d_head;
    c.seed = seed;
    c.threads = res.threads;
    c.save.clear();
    c.resume.clear();
    c.save_every = 0;
    c.stop_at = 0;
    c.eval_only = false;
    c.frozen_beta.reset();
    c.eval_set = "validation";
    return c;
  };
  const bool ensemble =
      spec.ensemble && std::find(spec.policies.begin(), spec.policies.end(), "adaptive") != spec.policies.end();

  // ---- training -------------------------------------------------------------------
  for (i64 dh : spec.d_heads)
    for (const auto& p : spec.policies)
      for (auto s : spec.seeds) res.runs.push_back(SweepRun{p, dh, s, {}, {}});
  std::vector<Checkpoint> states(res.runs.size());  // adaptive runs' final states, for the ensemble rule
  std::vector<Job> work;
  for (std::size_t i = 0; i < res.runs.size(); ++i) {
    SweepRun& r = res.runs[i];
    Job j{config(r.policy, r.d_head, r.seed), {}, &r.log, &r.summary, r.policy, r.d_head, r.seed};
    if (ensemble && r.policy == "adaptive") j.hooks.final_state = &states[i];
    work.push_back(std::move(j));
  }
  run_jobs(work, res.jobs, "training", progress);
  res.train_seconds = seconds_since(t_start);

  // ---- the ensemble rule ------------------------------------------------------------
  if (ensemble) {
    std::vector<std::size_t> scored;  // runs evaluated, two evaluations each: own β, then the best's
    std::vector<TrainSummary> evals;
    std::map<i64, std::size_t> best;  // d_head -> the adaptive run with the lowest validation loss
    for (std::size_t i = 0; i < res.runs.size(); ++i) {
      const SweepRun& r = res.runs[i];
      if (r.policy != "adaptive" || r.summary.diverged) continue;
      scored.push_back(i);
      auto b = best.find(r.d_head);
      if (b == best.end() || r.summary.eval_loss < res.runs[b->second].summary.eval_loss) best[r.d_head] = i;
    }
    evals.resize(2 * scored.size());
    work.clear();
    for (std::size_t k = 0; k < scored.size(); ++k) {
      const SweepRun& r = res.runs[scored[k]];
      for (int frozen = 0; frozen < 2; ++frozen) {
        Job j{config(r.policy, r.d_head, r.seed), {}, nullptr, &evals[2 * k + frozen], r.policy, r.d_head, r.seed};
        j.cfg.eval_only = true;
        j.cfg.eval_set = "test";
        if (frozen) j.cfg.frozen_beta = res.runs[best.at(r.d_head)].summary.beta;
        j.hooks.resume = &states[scored[k]];
        work.push_back(std::move(j));
      }
    }
    run_jobs(work, res.jobs, "ensemble evaluation", progress);
    for (std::size_t k = 0; k < scored.size(); ++k) {
      const SweepRun& r = res.runs[scored[k]];
      const SweepRun& b = res.runs[best.at(r.d_head)];
      const TrainSummary &own = evals[2 * k], &fz = evals[2 * k + 1];
      res.ensemble.push_back(EnsembleRow{r.d_head, r.seed, b.seed, own.beta, b.summary.beta, own.eval_loss,
                                         own.eval_accuracy, fz.eval_loss, fz.eval_accuracy});
    }
  }

  // ---- the summary over seeds -------------------------------------------------------
  for (i64 dh : spec.d_heads)
    for (const auto& p : spec.policies) {
      SweepCell cell{p, dh};
      std::vector<double> loss, acc, long_acc, steps_to, beta;
      for (const auto& r : res.runs) {
        if (r.policy != p || r.d_head != dh) continue;
        const TrainSummary& s = r.summary;
        ++cell.runs;
        if (s.diverged) {
          ++cell.diverged;
          continue;
        }
        loss.push_back(s.eval_loss);
        acc.push_back(s.eval_accuracy);
        if (s.eval_long_accuracy) long_acc.push_back(*s.eval_long_accuracy);
        if (s.steps_to_threshold > 0) {
          ++cell.reached;
          steps_to.push_back(static_cast<double>(s.steps_to_threshold));
        }
        beta.push_back(mean_of(s.beta));
      }
      cell.eval_loss = spread(loss);
      cell.eval_accuracy = spread(acc);
      cell.long_accuracy = spread(long_acc);
      cell.steps_to_threshold_mean = mean_of(steps_to);
      cell.beta_mean = mean_of(beta);
      res.summary.push_back(cell);
    }
  res.seconds = seconds_since(t_start);
  return res;
}

std::string summary_table(const SweepResult& r) {
  const TrainConfig& b = r.spec.base;
  // "mean ± sd" over seeds; just the mean when there is one value (no spread to show)
  auto pm = [](const Spread& s) {
    if (s.n == 0) return std::string("-");
    return s.n < 2 ? fmt::format("{:.4f}", s.mean) : fmt::format("{:.4f} ± {:.4f}", s.mean, s.sd);
  };
  const bool lengthgen = b.task == "lengthgen";
  std::string t = fmt::format(
      "sdpa sweep: task {} d_model {} layers {} seq {} steps {} batch {} lr {} seeds {} ({:.0f} s)\n"
      "{:<16} {:>6} {:>18} {:>18} {:>16} {:>9} {:>10}{}\n",
      b.task, b.d_model, b.layers, b.seq, b.steps, b.batch, b.lr, r.spec.seeds.size(), r.seconds, "policy", "d_head",
      "eval loss", "eval accuracy", fmt::format("steps to {:.0f}%", 100 * b.threshold), "diverged", "final beta",
      lengthgen ? fmt::format(" {:>18}", "accuracy at 2n") : "");
  for (const auto& c : r.summary) {
    const std::string steps = c.reached ? fmt::format("{:.0f} ({}/{})", c.steps_to_threshold_mean, c.reached, c.runs)
                                        : fmt::format("- (0/{})", c.runs);
    t += fmt::format("{:<16} {:>6} {:>18} {:>18} {:>16} {:>9} {:>10}{}\n", c.policy, c.d_head, pm(c.eval_loss),
                     pm(c.eval_accuracy), steps, fmt::format("{}/{}", c.diverged, c.runs),
                     fmt::format("{:.4g}", c.beta_mean),
                     c.long_accuracy.n ? fmt::format(" {:>18}", pm(c.long_accuracy)) : "");
  }
  if (!r.ensemble.empty()) {
    t += "ensemble rule (adaptive): inference beta of the best seed on the validation set, scored on a test set\n";
    t += fmt::format("{:>6} {:>5} {:>9} {:>22} {:>22}\n", "d_head", "seed", "best seed", "own beta: loss / acc",
                     "ensemble beta: loss/acc");
    for (const auto& e : r.ensemble)
      t += fmt::format("{:>6} {:>5} {:>9} {:>22} {:>22}\n", e.d_head, e.seed, e.best_seed,
                       fmt::format("{:.4f} / {:.4f}", e.own_test_loss, e.own_test_accuracy),
                       fmt::format("{:.4f} / {:.4f}", e.ensemble_test_loss, e.ensemble_test_accuracy));
  }
  return t;
}

nlohmann::ordered_json to_json(const SweepResult& r) {
  const TrainConfig& b = r.spec.base;
  nlohmann::ordered_json summary = nlohmann::ordered_json::array(), ensemble = nlohmann::ordered_json::array(),
                         runs = nlohmann::ordered_json::array();
  for (const auto& c : r.summary)
    summary.push_back({{"policy", c.policy},
                       {"d_head", c.d_head},
                       {"runs", c.runs},
                       {"diverged", c.diverged},
                       {"eval_loss_mean", io::json_number(c.eval_loss.mean)},
                       {"eval_loss_sd", io::json_number(c.eval_loss.sd)},
                       {"eval_accuracy_mean", io::json_number(c.eval_accuracy.mean)},
                       {"eval_accuracy_sd", io::json_number(c.eval_accuracy.sd)},
                       {"reached", c.reached},
                       {"steps_to_threshold_mean", io::json_number(c.steps_to_threshold_mean)},
                       {"beta_mean", io::json_number(c.beta_mean)},
                       {"long_accuracy_mean", io::json_number(c.long_accuracy.mean)},
                       {"long_accuracy_sd", io::json_number(c.long_accuracy.sd)}});
  for (const auto& e : r.ensemble) {
    ensemble.push_back({{"d_head", e.d_head},
                        {"seed", e.seed},
                        {"best_seed", e.best_seed},
                        {"ensemble_beta", e.ensemble_beta},
                        {"own_test_loss", io::json_number(e.own_test_loss)},
                        {"own_test_accuracy", io::json_number(e.own_test_accuracy)},
                        {"ensemble_test_loss", io::json_number(e.ensemble_test_loss)},
                        {"ensemble_test_accuracy", io::json_number(e.ensemble_test_accuracy)},
                        {"own_beta", per_head_json(e.own_beta, b.d_model / e.d_head)}});
  }
  for (const auto& run : r.runs) {
    nlohmann::ordered_json log = nlohmann::ordered_json::array();
    for (const auto& s : run.log) log.push_back(to_json(s, run.summary.heads));
    runs.push_back({{"policy", run.policy},
                    {"d_head", run.d_head},
                    {"seed", run.seed},
                    {"final", to_json(run.summary)},
                    {"log", log}});
  }
  return {{"version", SDPA_VERSION_STRING},
          {"task", b.task},
          {"d_model", b.d_model},
          {"layers", b.layers},
          {"seq", b.seq},
          {"steps", b.steps},
          {"batch", b.batch},
          {"lr", io::json_number(b.lr)},
          {"warmup", b.warmup},
          {"init", b.init},
          {"threshold", io::json_number(b.threshold)},
          {"jobs", r.jobs},
          {"threads", r.threads},
          {"seconds", r.seconds},
          {"train_seconds", r.train_seconds},
          {"table", summary_table(r)},
          {"summary", summary},
          {"ensemble", ensemble},
          {"runs", runs}};
}

}  // namespace sdpa::nn
