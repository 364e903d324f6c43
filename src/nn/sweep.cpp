// nn/sweep.cpp — see sweep.hpp.
#include "nn/sweep.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/atomic_file.hpp"
#include "io/json.hpp"

#include "nn/policy.hpp"
#include "nn/tasks.hpp"
#include "nn/text.hpp"
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

// t(0.975, df): the two-sided 95 % Student-t quantile, df = 1..30 (standard tables), then
// the normal's 1.96 (within 2 % of t for df > 30).
double t975(i64 df) {
  static const double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                             2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                             2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  return df <= 0 ? NAN : df <= 30 ? t[df - 1] : 1.96;
}

// One unit of work: a configuration and where its outcome goes.
struct Job {
  TrainConfig cfg;
  TrainHooks hooks;
  std::vector<StepRecord>* log = nullptr;  // logged steps, if wanted
  TrainSummary* summary = nullptr;
  const SweepRun* run = nullptr;  // the grid cell (progress, errors)
  std::function<void()> after;    // on success (storing the run)
};

// Trains the jobs, `jobs` at a time on their own threads (each run's OpenMP team is its
// own), in any order: each run's bits do not depend on threads or order. A failure stops new
// runs from starting; the one rethrown, naming its run, is the first in `work`'s order, not
// the first in time, which with two jobs failing at once would depend on timing (runs start
// in `work`'s order, so every run before a failed one has started and is let finish).
// `already` runs of the stage were done before (loaded from the store): they count as done
// in the progress.
void run_jobs(std::vector<Job>& work, int jobs, const std::string& stage, std::size_t already,
              const SweepProgress& progress) {
  std::atomic<std::size_t> next{0};
  std::mutex lock;
  std::exception_ptr failure;
  std::size_t failed_index = 0;  // of `failure` in `work`
  std::string failed_run;
  SweepStatus status;
  status.stage = stage;
  status.total = work.size() + already;
  status.done = status.stored = already;
  i64 steps_total = 0, steps_done = 0;  // over the jobs of this call: the ETA's rate
  for (const auto& j : work) steps_total += j.cfg.eval_only ? 1 : j.cfg.steps;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = [&](const Job& j, i64 step, bool finished) {  // under the lock
    status.run = j.run;
    status.step = step;
    status.steps = j.cfg.steps;
    status.finished = finished;
    status.elapsed_s = seconds_since(t0);
    status.eta_s = steps_done > 0 ? status.elapsed_s * static_cast<double>(steps_total - steps_done) /
                                        static_cast<double>(steps_done)
                                  : NAN;
    if (progress) progress(status);
  };
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < work.size();) {
      {
        const std::lock_guard<std::mutex> g(lock);
        if (failure) return;
      }
      Job& j = work[i];
      TrainHooks hooks = j.hooks;
      if (j.log) hooks.on_log = [&j](const StepRecord& r) { j.log->push_back(r); };
      hooks.on_step = [&](i64 t, double) {
        const std::lock_guard<std::mutex> g(lock);
        ++steps_done;
        report(j, t, false);
      };
      try {
        *j.summary = train(j.cfg, hooks);
        if (j.after) j.after();
      } catch (...) {
        const std::lock_guard<std::mutex> g(lock);
        if (!failure || i < failed_index) {
          failure = std::current_exception();
          failed_index = i;
          failed_run = fmt::format("{} of policy {} d_model {} d_head {} init {} lr {} seed {}", stage, j.run->policy,
                                   j.run->d_model, j.run->d_head, j.run->init, j.run->lr, j.run->seed);
        }
        return;
      }
      const std::lock_guard<std::mutex> g(lock);
      if (j.cfg.eval_only) ++steps_done;
      ++status.done;
      report(j, j.cfg.steps, true);
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

i64 heads_of(i64 d_model, i64 d_head) { return d_head == 0 ? 1 : d_model / d_head; }

// ---- the run store: one file per finished run ----------------------------------------

// A file name for the run: its grid coordinates, characters other than [A-Za-z0-9._-]
// (a policy's "fixed:0.5") as '_'.
std::string run_stem(const SweepRun& r) {
  std::string s = fmt::format("w{}_dk{}_{}_lr{}_{}_s{}", r.d_model, r.d_head, r.init, r.lr, r.policy, r.seed);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' && ch != '_') ch = '_';
  return s;
}

// The stored document: the identity it was trained under, the summary and the log. The
// store's file and what a SweepShare gathers: one form, so both give back the same bits.
std::string run_document(const SweepRun& r, const std::string& identity) {
  nlohmann::ordered_json log = nlohmann::ordered_json::array();
  for (const auto& row : r.log) log.push_back(to_json(row, r.summary.heads));
  const nlohmann::ordered_json doc{{"identity", identity}, {"final", to_json(r.summary)}, {"log", log}};
  return doc.dump() + "\n";
}

// Reads a run document (`where` names it in errors) into r; a document of another
// configuration is an error: the store belongs to one sweep.
void read_run_document(const std::string& text, const std::string& where, SweepRun& r, const std::string& identity) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("sweep: stored run '" + where + "' is not JSON (" + e.what() + "); remove it to train it again");
  }
  if (!doc.contains("identity") || doc["identity"] != identity)
    throw Error("sweep: stored run '" + where +
                "' was trained with another configuration; use another store (or remove the stored runs)");
  r.summary = train_summary_from_json(doc.at("final"), where);
  r.log.clear();
  for (const auto& row : doc.at("log")) r.log.push_back(step_record_from_json(row, where));
}

void store_run(const std::string& dir, const SweepRun& r, const std::string& identity, const Checkpoint* state) {
  const std::string text = run_document(r, identity);
  io::OutputSet out;
  // the state first, the JSON last: a run counts as stored once its JSON is there
  if (state) out.add(dir + "/" + run_stem(r) + ".ckpt", encode_checkpoint(*state));
  out.add(dir + "/" + run_stem(r) + ".json", std::vector<unsigned char>(text.begin(), text.end()));
  out.commit();
}

// Loads a stored run into r (and its state when `state` is given); false when it is not
// there (or its state is needed and missing).
bool load_run(const std::string& dir, SweepRun& r, const std::string& identity, Checkpoint* state) {
  const std::string path = dir + "/" + run_stem(r) + ".json";
  std::ifstream f(path);
  if (!f) return false;
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  SweepRun stored = r;  // r stays untouched unless the run is there whole
  read_run_document(text, path, stored, identity);
  if (state) {
    const std::string ck = dir + "/" + run_stem(r) + ".ckpt";
    if (!std::ifstream(ck)) return false;
    *state = load_checkpoint(ck);
  }
  r = std::move(stored);
  r.from_store = true;
  return true;
}

}  // namespace

std::string SweepRun::group() const { return fmt::format("d_model {} d_k {} {} lr {}", d_model, d_head, init, lr); }

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
    s.ci95 = t975(s.n - 1) * s.sd / std::sqrt(static_cast<double>(s.n));
  }
  return s;
}

namespace {

std::vector<i64> widths_of(const SweepSpec& s) {
  return s.widths.empty() ? std::vector<i64>{s.base.d_model} : s.widths;
}
std::vector<std::string> inits_of(const SweepSpec& s) {
  return s.inits.empty() ? std::vector<std::string>{s.base.init} : s.inits;
}
std::vector<double> lrs_of(const SweepSpec& s) { return s.lrs.empty() ? std::vector<double>{s.base.lr} : s.lrs; }

// The grid, in order: width, d_head, init, lr, policy, seed.
std::vector<SweepRun> grid(const SweepSpec& spec) {
  std::vector<SweepRun> runs;
  for (i64 w : widths_of(spec)) {
    std::vector<i64> head_sizes;  // d_head 0 is d_model: once per width, even if also named
    for (i64 dh : spec.d_heads)
      if (std::find(head_sizes.begin(), head_sizes.end(), dh ? dh : w) == head_sizes.end())
        head_sizes.push_back(dh ? dh : w);
    for (i64 dh : head_sizes)
      for (const auto& init : inits_of(spec))
        for (double lr : lrs_of(spec))
          for (const auto& p : spec.policies)
            for (auto s : spec.seeds) {
              SweepRun r;
              r.policy = p;
              r.d_head = dh;
              r.seed = s;
              r.d_model = w;
              r.init = init;
              r.lr = lr;
              runs.push_back(std::move(r));
            }
  }
  return runs;
}

// The runs whose final model writes the sample of its policy (text task only): the
// policy's first run in grid order.
std::vector<std::size_t> sampled_runs(const SweepSpec& spec, const std::vector<SweepRun>& runs) {
  std::vector<std::size_t> out;
  if (spec.base.task != "text" || spec.sample.prompt.empty()) return out;
  for (const auto& p : spec.policies)
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (runs[i].policy == p) {
        out.push_back(i);
        break;
      }
  return out;
}

TrainConfig config_of(const SweepSpec& spec, const SweepRun& r, int threads) {
  TrainConfig c = spec.base;
  c.policy = r.policy;
  c.d_model = r.d_model;
  c.heads = heads_of(r.d_model, r.d_head);
  c.init = r.init;
  c.lr = r.lr;
  c.seed = r.seed;
  c.threads = threads;
  c.save.clear();
  c.resume.clear();
  c.save_every = 0;
  c.stop_at = 0;
  c.eval_only = false;
  c.frozen_beta.reset();
  c.eval_set = "validation";
  return c;
}

// --budget: seconds per training step measured on a short probe run of each width (the
// cost grows with the width; policy, init and seed change it little), times the steps of
// every run still to train, over the runs trained at once. Then the grid is cut — seeds
// beyond two, the widest widths, inits, learning rates, the last seeds, head sizes — until
// the estimate fits; each cut is stated.
void fit_budget(SweepSpec& spec, SweepResult& res, const std::function<bool(const SweepRun&)>& stored) {
  std::map<i64, double> per_step;
  for (i64 w : widths_of(spec)) {
    SweepRun probe = grid(spec).front();
    probe.d_model = w;
    TrainConfig c = config_of(spec, probe, res.threads);
    c.steps = std::min<i64>(spec.base.steps, 20);
    c.warmup = std::min(c.warmup, c.steps);
    c.log_every = std::max<i64>(1, spec.base.log_every);
    const auto t0 = std::chrono::steady_clock::now();
    train(c);
    // evaluations add about (steps / log_every) forward passes of eval_size sequences; the
    // probe includes one (step 1) per c.steps steps, and real runs one per log_every steps
    per_step[w] = seconds_since(t0) / static_cast<double>(c.steps);
  }
  auto estimate = [&] {
    double total = 0;
    for (const auto& r : grid(spec))
      if (!stored(r)) total += per_step.at(r.d_model) * static_cast<double>(spec.base.steps);
    return total / static_cast<double>(res.jobs);
  };
  double est = estimate();
  const double full = est;
  while (est > spec.budget_s) {
    std::string cut;
    if (spec.seeds.size() > 2) {
      cut = fmt::format("seed {}", spec.seeds.back());
      spec.seeds.pop_back();
    } else if (widths_of(spec).size() > 1) {
      auto w = widths_of(spec);
      const auto widest = std::max_element(w.begin(), w.end());
      cut = fmt::format("width {}", *widest);
      w.erase(widest);
      spec.widths = w;
    } else if (inits_of(spec).size() > 1) {
      cut = "init " + spec.inits.back();
      spec.inits.pop_back();
    } else if (lrs_of(spec).size() > 1) {
      cut = fmt::format("lr {}", spec.lrs.back());
      spec.lrs.pop_back();
    } else if (spec.seeds.size() > 1) {
      cut = fmt::format("seed {}", spec.seeds.back());
      spec.seeds.pop_back();
    } else if (spec.d_heads.size() > 1) {
      cut = fmt::format("d_head {}", spec.d_heads.back());
      spec.d_heads.pop_back();
    } else {
      throw Error(fmt::format("budget_s: {:.3g} s is too little: the smallest grid left (one run) needs about {:.3g} s",
                              spec.budget_s, est));
    }
    res.cuts.push_back(cut);
    est = estimate();
  }
  if (!res.cuts.empty()) res.cuts.insert(res.cuts.begin(), fmt::format("the full grid needed about {:.0f} s", full));
  res.estimate_s = est;
}

}  // namespace

std::size_t grid_size(const SweepSpec& spec) { return grid(spec).size(); }

void validate(const SweepSpec& spec) {
  if (spec.policies.empty() || spec.seeds.empty() || spec.d_heads.empty())
    throw Error(std::string(spec.policies.empty() ? "policies"
                            : spec.seeds.empty()  ? "seeds"
                                                  : "d_heads") +
                ": needs at least one value");
  for (const auto& p : spec.policies) parse_policy(p, "policies");
  for (const auto& i : inits_of(spec)) parse_init(i);
  for (double lr : lrs_of(spec))
    if (!(lr > 0) || !std::isfinite(lr)) throw Error("lrs: every learning rate must be a finite value > 0");
  for (i64 w : widths_of(spec)) {
    if (w <= 0) throw Error("widths: every width must be >= 1, got " + std::to_string(w));
    for (i64 d : spec.d_heads)
      if (d < 0 || (d > 0 && w % d != 0))
        throw Error("d_heads: " + std::to_string(d) + " does not divide the width " + std::to_string(w));
  }
  const Task task = parse_task(spec.base.task, spec.base.seq, spec.base.corpus);
  if (task.corpus && !spec.sample.prompt.empty()) {  // the samples' prompt, checked before any training
    for (char32_t ch : decode_utf8(spec.sample.prompt, "sample_prompt"))
      if (!std::binary_search(task.corpus->alphabet.begin(), task.corpus->alphabet.end(), ch))
        throw Error("sample_prompt: the character '" + encode_utf8(std::u32string(1, ch)) +
                    "' is not in the corpus's alphabet (an empty prompt: no samples)");
  }
  if (spec.jobs < 0) throw Error("jobs: must be >= 0, got " + std::to_string(spec.jobs));
  if (spec.base.threads < 0) throw Error("threads: must be >= 0, got " + std::to_string(spec.base.threads));
  if (spec.budget_s < 0 || !std::isfinite(spec.budget_s))
    throw Error("budget_s: must be a finite number of seconds >= 0");
}

namespace {

// What every phase of a sweep reads: the spec as run (after the budget's cuts), the ranks, the
// task (parsed once, for the corpus's hash in each run's identity), the threads per run.
struct SweepContext {
  SweepSpec spec;
  const SweepShare& share;
  Task task;
  bool shared = false;    // more than one rank
  bool ensemble = false;  // the ensemble rule wanted: asked for, and adaptive swept
  int threads = 1;
  // The identity of a run's configuration (what its stored file must have been trained under).
  std::string identity(const SweepRun& r) const { return config_of(spec, r, threads).identity(task); }
  // A shared sweep: rank `rank` takes every ranks-th run.
  bool mine(std::size_t i) const {
    return i % static_cast<std::size_t>(share.ranks) == static_cast<std::size_t>(share.rank);
  }
  bool stored(const SweepRun& r) const {
    return !spec.store.empty() && static_cast<bool>(std::ifstream(spec.store + "/" + run_stem(r) + ".json"));
  }
};

// Checks the spec and the ranks, picks jobs and threads, cuts the grid to the budget, makes
// the ranks agree on it and creates the store: nothing is written before all of that passed.
SweepContext prepare(const SweepSpec& spec_in, const SweepShare& share, SweepResult& res) {
  validate(spec_in);
  const bool shared = share.ranks > 1;
  if (share.ranks < 1 || share.rank < 0 || share.rank >= share.ranks || share.ranks_on_node < 1)
    throw Error("sweep: rank " + std::to_string(share.rank) + " of " + std::to_string(share.ranks) + " is no rank");
  if (shared && (!share.agree || !share.gather)) throw Error("sweep: a shared sweep needs its agree and gather hooks");
  // Each rank would measure its own speed and might cut the grid differently.
  if (shared && spec_in.budget_s > 0) throw Error("budget_s: not with several ranks; run the budgeted sweep on one");

  SweepContext ctx{spec_in, share, parse_task(spec_in.base.task, spec_in.base.seq, spec_in.base.corpus)};
  ctx.shared = shared;
  res.ranks = share.ranks;
  // The processes on this machine share its cores (a rank bound to fewer sees fewer).
  const int cores = std::max(1, omp_get_num_procs() / share.ranks_on_node);
  res.jobs = ctx.spec.jobs > 0 ? ctx.spec.jobs : std::min(2, cores);
  res.threads = ctx.threads = ctx.spec.base.threads > 0 ? ctx.spec.base.threads : std::max(1, cores / res.jobs);
  ctx.ensemble = ctx.spec.ensemble &&
                 std::find(ctx.spec.policies.begin(), ctx.spec.policies.end(), "adaptive") != ctx.spec.policies.end();
  if (ctx.spec.budget_s > 0) fit_budget(ctx.spec, res, [&ctx](const SweepRun& r) { return ctx.stored(r); });
  if (shared) {  // the same grid on every rank, before anything is written
    std::string ids = ctx.spec.store + (ctx.ensemble ? ";ensemble" : "");
    for (const auto& r : grid(ctx.spec)) ids += "\n" + ctx.identity(r);
    share.agree("the sweep's grid and settings", ids);
  }
  if (!ctx.spec.store.empty()) {  // after the budget check: a refused sweep writes nothing
    std::error_code ec;
    std::filesystem::create_directories(ctx.spec.store, ec);
    if (ec) throw Error("sweep: cannot create the run store '" + ctx.spec.store + "': " + ec.message());
  }
  res.spec = ctx.spec;
  return ctx;
}

// Trains this rank's runs (or loads what the store holds), keeping the final states the later
// phases need (adaptive runs' for the ensemble rule, the sampled runs' for the samples); a
// shared sweep then gathers every rank's runs on rank 0. Returns whether this process holds
// the whole grid now (false on the other ranks, whose part ends here).
bool train_runs(const SweepContext& ctx, SweepResult& res, std::vector<Checkpoint>& states,
                const std::vector<std::size_t>& sampled, const SweepProgress& progress) {
  const SweepSpec& spec = ctx.spec;
  std::vector<Job> work;
  std::size_t loaded = 0;
  for (std::size_t i = 0; i < res.runs.size(); ++i) {
    if (!ctx.mine(i)) continue;
    SweepRun& r = res.runs[i];
    const bool keep_state =
        (ctx.ensemble && r.policy == "adaptive") || std::find(sampled.begin(), sampled.end(), i) != sampled.end();
    if (!spec.store.empty() && load_run(spec.store, r, ctx.identity(r), keep_state ? &states[i] : nullptr)) {
      ++loaded;
      continue;
    }
    Job j{config_of(spec, r, ctx.threads), {}, &r.log, &r.summary, &r, {}};
    if (keep_state) j.hooks.final_state = &states[i];
    if (!spec.store.empty())
      j.after = [&spec, &r, id = ctx.identity(r), state = keep_state ? &states[i] : nullptr] {
        store_run(spec.store, r, id, state);
      };
    work.push_back(std::move(j));
  }
  run_jobs(work, res.jobs, "training", loaded, progress);
  if (!ctx.shared) return true;

  // Every rank's runs to rank 0, in the store's form: three strings a run.
  std::vector<std::string> out;
  for (std::size_t i = 0; i < res.runs.size(); ++i) {
    if (!ctx.mine(i)) continue;
    const auto state = states[i].params.empty() ? std::vector<unsigned char>{} : encode_checkpoint(states[i]);
    out.push_back(run_document(res.runs[i], ctx.identity(res.runs[i])));
    out.emplace_back(state.begin(), state.end());
    out.emplace_back(res.runs[i].from_store ? "stored" : "trained");
  }
  const std::vector<std::string> all = ctx.share.gather(out);
  if (ctx.share.rank != 0) return false;
  std::size_t at = 0;  // rank p's runs are p, p + P, ..., in order
  for (int p = 0; p < ctx.share.ranks; ++p)
    for (std::size_t i = static_cast<std::size_t>(p); i < res.runs.size();
         i += static_cast<std::size_t>(ctx.share.ranks)) {
      if (at + 3 > all.size()) throw Error("sweep: rank " + std::to_string(p) + " sent fewer runs than its share");
      SweepRun& r = res.runs[i];
      if (p != 0) {
        const std::string where = "rank " + std::to_string(p) + ": " + run_stem(r);
        read_run_document(all[at], where, r, ctx.identity(r));
        if (!all[at + 1].empty())
          states[i] = decode_checkpoint(std::vector<unsigned char>(all[at + 1].begin(), all[at + 1].end()), where);
        r.from_store = all[at + 2] == "stored";
      }
      at += 3;
    }
  if (at != all.size()) throw Error("sweep: the ranks sent more runs than the grid has");
  return true;
}

// The seed note's ensemble rule: each adaptive run evaluated on the test set with its own β,
// then with the β of its group's run of lowest validation loss.
void evaluate_ensemble(const SweepContext& ctx, SweepResult& res, std::vector<Checkpoint>& states,
                       const SweepProgress& progress) {
  std::vector<std::size_t> scored;  // runs evaluated, two evaluations each: own β, then the best's
  std::vector<TrainSummary> evals;
  std::map<std::string, std::size_t> best;  // group -> the adaptive run with the lowest validation loss
  for (std::size_t i = 0; i < res.runs.size(); ++i) {
    const SweepRun& r = res.runs[i];
    if (r.policy != "adaptive" || r.summary.diverged) continue;
    scored.push_back(i);
    auto b = best.find(r.group());
    if (b == best.end() || r.summary.eval_loss < res.runs[b->second].summary.eval_loss) best[r.group()] = i;
  }
  evals.resize(2 * scored.size());
  std::vector<Job> work;
  for (std::size_t k = 0; k < scored.size(); ++k) {
    const SweepRun& r = res.runs[scored[k]];
    for (int frozen = 0; frozen < 2; ++frozen) {
      Job j{config_of(ctx.spec, r, ctx.threads), {}, nullptr, &evals[2 * k + frozen], &r, {}};
      j.cfg.eval_only = true;
      j.cfg.eval_set = "test";
      if (frozen) j.cfg.frozen_beta = res.runs[best.at(r.group())].summary.beta;
      j.hooks.resume = &states[scored[k]];
      work.push_back(std::move(j));
    }
  }
  run_jobs(work, res.jobs, "ensemble evaluation", 0, progress);
  for (std::size_t k = 0; k < scored.size(); ++k) {
    const SweepRun& r = res.runs[scored[k]];
    const SweepRun& b = res.runs[best.at(r.group())];
    const TrainSummary &own = evals[2 * k], &fz = evals[2 * k + 1];
    res.ensemble.push_back(EnsembleRow{r.d_head, r.seed, b.seed, own.beta, b.summary.beta, own.eval_loss,
                                       own.eval_accuracy, fz.eval_loss, fz.eval_accuracy, r.group(),
                                       heads_of(r.d_model, r.d_head)});
  }
}

// The summary over seeds per (group, policy), the paired differences against inv_sqrt_dk,
// and each policy's learning rates against its best.
void summarize(const SweepSpec& spec, SweepResult& res) {
  std::vector<std::string> groups;
  for (const auto& r : res.runs)
    if (std::find(groups.begin(), groups.end(), r.group()) == groups.end()) groups.push_back(r.group());
  // The one paired difference: for each run of `a` that did not diverge, its held-out loss
  // minus that of the run of `b` with the same seed (skipped where that one diverged).
  auto paired = [&](const auto& a, const auto& b) {
    std::vector<double> diff;
    for (const auto& r : res.runs)
      if (a(r) && !r.summary.diverged)
        for (const auto& o : res.runs)
          if (b(o) && o.seed == r.seed && !o.summary.diverged)
            diff.push_back(r.summary.eval_loss - o.summary.eval_loss);
    return spread(diff);
  };
  for (const auto& g : groups)
    for (const auto& p : spec.policies) {
      SweepCell cell;
      cell.policy = p;
      std::vector<double> loss, acc, long_acc, steps_to, beta;
      for (const auto& r : res.runs) {
        if (r.policy != p || r.group() != g) continue;
        cell.d_head = r.d_head;
        cell.d_model = r.d_model;
        cell.init = r.init;
        cell.lr = r.lr;
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
      // (inv_sqrt_dk against itself: no runs, an empty spread, as the table shows it)
      cell.paired_difference =
          paired([&](const SweepRun& r) { return p != "inv_sqrt_dk" && r.policy == p && r.group() == g; },
                 [&](const SweepRun& r) { return r.policy == "inv_sqrt_dk" && r.group() == g; });
      cell.steps_to_threshold_mean = mean_of(steps_to);
      cell.beta_mean = mean_of(beta);
      res.summary.push_back(cell);
    }
  // Each policy's best learning rate per (width, head size, initialisation), and every other
  // lr against it seed by seed: which lr is best only counts where those intervals exclude 0.
  if (lrs_of(spec).size() > 1)
    for (auto& c : res.summary) {
      auto same_but_lr = [&c](const auto& x) {
        return x.policy == c.policy && x.d_model == c.d_model && x.d_head == c.d_head && x.init == c.init;
      };
      const SweepCell* best = nullptr;
      for (const auto& o : res.summary)
        if (same_but_lr(o) && o.diverged == 0 && o.eval_loss.n > 0 && std::isfinite(o.eval_loss.mean) &&
            (!best || o.eval_loss.mean < best->eval_loss.mean))
          best = &o;
      if (!best) continue;
      c.best_lr = best == &c;
      if (c.best_lr) continue;
      const double best_lr = best->lr;
      c.vs_best_lr = paired([&](const SweepRun& r) { return same_but_lr(r) && r.lr == c.lr; },
                            [&](const SweepRun& r) { return same_but_lr(r) && r.lr == best_lr; });
    }
}

}  // namespace

SweepResult sweep(const SweepSpec& spec_in, const SweepProgress& progress, const SweepShare& share) {
  const auto t_start = std::chrono::steady_clock::now();
  SweepResult res;
  const SweepContext ctx = prepare(spec_in, share, res);
  res.runs = grid(ctx.spec);
  // Final states kept: adaptive runs' for the ensemble rule, the sampled runs' for the samples.
  std::vector<Checkpoint> states(res.runs.size());
  const std::vector<std::size_t> sampled = sampled_runs(ctx.spec, res.runs);
  if (!train_runs(ctx, res, states, sampled, progress)) {  // another rank's part of a shared sweep
    res.complete = false;
    res.train_seconds = res.seconds = seconds_since(t_start);
    return res;
  }
  res.train_seconds = seconds_since(t_start);
  if (ctx.ensemble) evaluate_ensemble(ctx, res, states, progress);
  for (std::size_t i : sampled) {  // one sample per policy (text)
    const SweepRun& r = res.runs[i];
    if (!r.summary.diverged) res.samples.push_back({r.policy, r.group(), r.seed, sample(states[i], ctx.spec.sample)});
  }
  summarize(ctx.spec, res);
  res.seconds = seconds_since(t_start);
  return res;
}

std::string summary_table(const SweepResult& r) {
  const TrainConfig& b = r.spec.base;
  // The held-out loss in the unit the task reads in: bits per character for text, nats else.
  const bool text = b.task == "text";
  const double unit = text ? 1.0 / std::log(2.0) : 1.0;
  auto ci = [unit](const Spread& s) {  // "mean ± 95 % half-width"; the mean alone for one value
    if (s.n == 0) return std::string("-");
    return s.n < 2 ? fmt::format("{:.4f}", unit * s.mean)
                   : fmt::format("{:.4f} ± {:.4f}", unit * s.mean, unit * s.ci95);
  };
  auto pm = [](const Spread& s) {  // "mean ± sd"
    if (s.n == 0) return std::string("-");
    return s.n < 2 ? fmt::format("{:.4f}", s.mean) : fmt::format("{:.4f} ± {:.4f}", s.mean, s.sd);
  };
  const bool lengthgen = b.task == "lengthgen";
  const bool several_inits = inits_of(r.spec).size() > 1, several_lrs = lrs_of(r.spec).size() > 1;
  std::string t = fmt::format(
      "sdpa sweep: task {} d_model {} layers {} seq {} steps {} batch {} lr {} init {} seeds {} ({:.0f} s)\n"
      "  {}: mean ± 95% interval over seeds; Δ: paired difference against inv_sqrt_dk, same seeds, ± 95%\n"
      "{}"
      "{:<16} {:>7} {:>6}{}{} {:>18} {:>20} {:>18} {:>16} {:>9} {:>10}{}{}\n",
      b.task, fmt::join(widths_of(r.spec), ","), b.layers, b.seq, b.steps, b.batch, fmt::join(lrs_of(r.spec), ","),
      fmt::join(inits_of(r.spec), ","), r.spec.seeds.size(), r.seconds, text ? "eval bits/char" : "eval loss (nats)",
      several_lrs ? "  vs best lr: paired difference against the policy's best lr (*), same seeds, ± 95%\n" : "",
      "policy", "d_model", "d_k", several_inits ? fmt::format(" {:>11}", "init") : "",
      several_lrs ? fmt::format(" {:>8}", "lr") : "", text ? "eval bits/char" : "eval loss", "Δ vs inv_sqrt_dk",
      "eval accuracy ± sd", fmt::format("steps to {:.0f}%", 100 * b.threshold), "diverged", "final beta",
      lengthgen ? fmt::format(" {:>18}", "accuracy at 2n") : "",
      several_lrs ? fmt::format(" {:>20}", "vs best lr") : "");
  for (const auto& c : r.summary) {
    const std::string steps = c.reached ? fmt::format("{:.0f} ({}/{})", c.steps_to_threshold_mean, c.reached, c.runs)
                                        : fmt::format("- (0/{})", c.runs);
    t += fmt::format("{:<16} {:>7} {:>6}{}{} {:>18} {:>20} {:>18} {:>16} {:>9} {:>10}{}{}\n", c.policy, c.d_model,
                     c.d_head ? c.d_head : c.d_model, several_inits ? fmt::format(" {:>11}", c.init) : "",
                     several_lrs ? fmt::format(" {:>8}", c.lr) : "", ci(c.eval_loss),
                     c.paired_difference.n ? ci(c.paired_difference) : "", pm(c.eval_accuracy), steps,
                     fmt::format("{}/{}", c.diverged, c.runs), fmt::format("{:.4g}", c.beta_mean),
                     c.long_accuracy.n ? fmt::format(" {:>18}", pm(c.long_accuracy)) : "",
                     !several_lrs     ? ""
                     : c.best_lr      ? fmt::format(" {:>20}", "*")
                     : c.vs_best_lr.n ? fmt::format(" {:>20}", ci(c.vs_best_lr))
                                      : fmt::format(" {:>20}", "-"));
  }
  if (!r.ensemble.empty()) {
    t += "ensemble rule (adaptive): inference beta of the best seed on the validation set, scored on a test set\n";
    t += fmt::format("{:<36} {:>5} {:>9} {:>22} {:>22}\n", "group", "seed", "best seed", "own beta: loss / acc",
                     "ensemble beta: loss/acc");
    for (const auto& e : r.ensemble)
      t += fmt::format("{:<36} {:>5} {:>9} {:>22} {:>22}\n", e.group, e.seed, e.best_seed,
                       fmt::format("{:.4f} / {:.4f}", e.own_test_loss, e.own_test_accuracy),
                       fmt::format("{:.4f} / {:.4f}", e.ensemble_test_loss, e.ensemble_test_accuracy));
  }
  for (const auto& c : r.cuts) t += "budget: " + (c.rfind("the full", 0) == 0 ? c : "cut " + c) + "\n";
  return t;
}

nlohmann::ordered_json to_json(const SweepResult& r) {
  const TrainConfig& b = r.spec.base;
  nlohmann::ordered_json summary = nlohmann::ordered_json::array(), ensemble = nlohmann::ordered_json::array(),
                         runs = nlohmann::ordered_json::array();
  for (const auto& c : r.summary)
    summary.push_back({{"policy", c.policy},
                       {"d_model", c.d_model},
                       {"d_head", c.d_head},
                       {"init", c.init},
                       {"lr", io::json_number(c.lr)},
                       {"runs", c.runs},
                       {"diverged", c.diverged},
                       {"eval_loss_mean", io::json_number(c.eval_loss.mean)},
                       {"eval_loss_sd", io::json_number(c.eval_loss.sd)},
                       {"eval_loss_ci95", io::json_number(c.eval_loss.ci95)},
                       {"paired_difference_n", c.paired_difference.n},
                       {"paired_difference_mean", io::json_number(c.paired_difference.mean)},
                       {"paired_difference_ci95", io::json_number(c.paired_difference.ci95)},
                       {"best_lr", c.best_lr},
                       {"vs_best_lr_n", c.vs_best_lr.n},
                       {"vs_best_lr_mean", io::json_number(c.vs_best_lr.mean)},
                       {"vs_best_lr_ci95", io::json_number(c.vs_best_lr.ci95)},
                       {"eval_accuracy_mean", io::json_number(c.eval_accuracy.mean)},
                       {"eval_accuracy_sd", io::json_number(c.eval_accuracy.sd)},
                       {"reached", c.reached},
                       {"steps_to_threshold_mean", io::json_number(c.steps_to_threshold_mean)},
                       {"beta_mean", io::json_number(c.beta_mean)},
                       {"long_accuracy_mean", io::json_number(c.long_accuracy.mean)},
                       {"long_accuracy_sd", io::json_number(c.long_accuracy.sd)}});
  for (const auto& e : r.ensemble) {
    ensemble.push_back({{"group", e.group},
                        {"d_head", e.d_head},
                        {"seed", e.seed},
                        {"best_seed", e.best_seed},
                        {"ensemble_beta", e.ensemble_beta},
                        {"own_test_loss", io::json_number(e.own_test_loss)},
                        {"own_test_accuracy", io::json_number(e.own_test_accuracy)},
                        {"ensemble_test_loss", io::json_number(e.ensemble_test_loss)},
                        {"ensemble_test_accuracy", io::json_number(e.ensemble_test_accuracy)},
                        {"own_beta", per_head_json(e.own_beta, e.heads)}});
  }
  nlohmann::ordered_json samples = nlohmann::ordered_json::array();
  for (const auto& smp : r.samples)
    samples.push_back({{"policy", smp.policy}, {"group", smp.group}, {"seed", smp.seed}, {"text", smp.text}});
  for (const auto& run : r.runs) {
    nlohmann::ordered_json log = nlohmann::ordered_json::array();
    for (const auto& s : run.log) log.push_back(to_json(s, run.summary.heads));
    runs.push_back({{"policy", run.policy},
                    {"d_model", run.d_model},
                    {"d_head", run.d_head},
                    {"init", run.init},
                    {"lr", io::json_number(run.lr)},
                    {"seed", run.seed},
                    {"final", to_json(run.summary)},
                    {"log", log}});
  }
  return {
      {"version", SDPA_VERSION_STRING},
      {"task", b.task},
      {"corpus", b.task == "text" ? nlohmann::ordered_json(b.corpus.empty() ? "shakespeare" : b.corpus)
                                  : nlohmann::ordered_json(nullptr)},
      {"d_model", b.d_model},
      {"widths", widths_of(r.spec)},
      {"inits", inits_of(r.spec)},
      {"lrs", lrs_of(r.spec)},
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
      {"ranks", r.ranks},
      {"seconds", r.seconds},
      {"train_seconds", r.train_seconds},
      {"runs_from_store", std::count_if(r.runs.begin(), r.runs.end(), [](const SweepRun& x) { return x.from_store; })},
      {"budget_s", io::json_number(r.spec.budget_s)},
      {"budget_estimate_s", io::json_number(r.estimate_s)},
      {"budget_cuts", r.cuts},
      {"table", summary_table(r)},
      {"summary", summary},
      {"ensemble", ensemble},
      {"sample",
       {{"prompt", r.spec.sample.prompt},
        {"tokens", r.spec.sample.tokens},
        {"temperature", io::json_number(r.spec.sample.temperature)},
        {"seed", r.spec.sample.seed}}},
      {"samples", samples},
      {"runs", runs}};
}

}  // namespace sdpa::nn
