// cmd_sweep.cpp — `sdpa sweep`: parse the grid, run nn::sweep (src/nn/sweep.hpp), print
// its table, write DIR/sweep.json and DIR/index.html (plots by sdpa_train_report.py)
// all-or-nothing, like `sdpa lab report`. Under mpirun the ranks share the grid
// (run_sweep_ranks, cmd_ring.cpp) and rank 0 writes.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "io/data_file.hpp"
#include "nn/sweep.hpp"
#include "ring.hpp"

namespace sdpa::cli {
namespace {

struct SweepArgs {
  nn::SweepSpec spec = nn::SweepSpec::defaults();
  bool no_ensemble = false, no_store = false;
  std::string out;
};

// "1 h 02 min", "3 min 05 s", "42 s"
std::string duration(double s) {
  if (!std::isfinite(s)) return "?";
  const auto t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{} h {:02} min", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{} min {:02} s", t / 60, t % 60);
  return fmt::format("{} s", t);
}

// One process's sweep: all of it, or under mpirun its share (rank 0 then writes the report).
int sweep_on(SweepArgs& a, const nn::SweepShare& share) {
  a.spec.ensemble = !a.no_ensemble;
  nn::validate(a.spec);
  const ReportDir dir(a.out);
  if (!a.no_store) a.spec.store = dir.path() + "/runs";
  const std::string script = io::data_file("sdpa_train_report.py");  // before the training, not after
  const bool tty = stderr_is_terminal() && share.ranks == 1;         // lines updated in place do not mix across ranks
  const auto& s = a.spec;
  const std::string who =
      share.ranks > 1 ? fmt::format("sdpa sweep [rank {}/{}]", share.rank, share.ranks) : "sdpa sweep";
  const std::size_t widths = std::max<std::size_t>(1, s.widths.size()),
                    inits = std::max<std::size_t>(1, s.inits.size()), lrs = std::max<std::size_t>(1, s.lrs.size());
  // The count is the grid's own: a --d-head 0 that equals another head size at a width is one run.
  if (share.rank == 0)
    fmt::print(stderr,
               "sdpa sweep: {} runs ({} policies x {} widths x head sizes {} x {} inits x {} lrs x {} seeds){}{}\n",
               nn::grid_size(s), s.policies.size(), widths, fmt::join(s.d_heads, ","), inits, lrs, s.seeds.size(),
               share.ranks > 1 ? fmt::format(" over {} ranks", share.ranks) : "",
               s.budget_s > 0 ? fmt::format("; measuring the speed for --budget {}", duration(s.budget_s)) : "");
  const double t0 = now_seconds();
  double last_line = -1e9;
  // Progress: a line updated in place on a terminal; elsewhere (a log file) one line per
  // finished run and one every 30 s, so that a sweep left running can be followed with tail.
  const nn::SweepResult result = nn::sweep(
      s,
      [&](const nn::SweepStatus& st) {
        const nn::SweepRun& r = *st.run;
        const std::string run = fmt::format("{} d_model={} d_k={} init={} lr={} seed={}", r.policy, r.d_model,
                                            r.d_head ? r.d_head : r.d_model, r.init, r.lr, r.seed);
        const std::string where = fmt::format("{}: {} {}/{} runs done{}, {} elapsed, ETA {}", who, st.stage, st.done,
                                              st.total, st.stored ? fmt::format(" ({} stored before)", st.stored) : "",
                                              duration(seconds_since(t0)), duration(st.eta_s));
        if (st.finished) {
          const std::string what = st.stage == "training"
                                       ? fmt::format("finished {}: held-out loss {:.4f}{}", run, r.summary.eval_loss,
                                                     r.summary.diverged ? " (diverged)" : "")
                                       : "evaluated " + run;
          fmt::print(stderr, "{}{}; {}\n", tty ? "\r\033[K" : "", where, what);
          last_line = now_seconds();
        } else if (tty && now_seconds() - last_line > 0.5) {
          fmt::print(stderr, "\r\033[K{}; step {}/{} of {}", where, st.step, st.steps, run);
          last_line = now_seconds();
        } else if (!tty && now_seconds() - last_line > 30) {
          fmt::print(stderr, "{}; step {}/{} of {}\n", where, st.step, st.steps, run);
          last_line = now_seconds();
        }
      },
      share);
  if (tty) fmt::print(stderr, "\r\033[K");
  if (!result.complete) return 0;  // rank 0 writes the report
  for (const auto& c : result.cuts)
    fmt::print(stderr, "sdpa sweep: --budget: {}\n", c.rfind("the full", 0) == 0 ? c : "cut " + c);
  if (s.budget_s > 0)
    fmt::print(stderr, "sdpa sweep: --budget: estimated {} for the runs kept\n", duration(result.estimate_s));
  fmt::print(stderr, "sdpa sweep: {} at a time, {} thread(s) each{}\n", result.jobs, result.threads,
             result.ranks > 1 ? fmt::format(" (rank 0; {} ranks)", result.ranks) : "");

  const std::string doc = nn::to_json(result).dump() + "\n";
  io::OutputSet files;
  const std::string data_path =
      files.add(dir.path() + "/sweep.json", std::vector<unsigned char>(doc.begin(), doc.end()));
  files.add(dir.path() + "/index.html", run_plot_script("sweep", plot_python(), script, {"--data", data_path}));
  files.commit();
  fmt::print("{}", nn::summary_table(result));
  fmt::print("sdpa sweep: wrote {}/index.html and {}/sweep.json ({:.1f} s)\n", dir.path(), dir.path(),
             seconds_since(t0));
  return 0;
}

int run_sweep(SweepArgs& a) {
  if (launched_by_mpirun()) return run_sweep_ranks([&](const nn::SweepShare& share) { return sweep_on(a, share); });
  return sweep_on(a, {});
}

}  // namespace

Command add_sweep(CLI::App& parent) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* app = parent.add_subcommand(
      "sweep",
      "Train every policy x width x head size x init x lr x seed in this process (--jobs runs at a time), "
      "storing each finished run in DIR/runs/ (a re-run resumes); print a summary table and write "
      "DIR/index.html and DIR/sweep.json (docs/training.md)");
  add_train_options(app, a->spec.base, false);
  app->add_option("--policies", a->spec.policies, "Temperature policies")->capture_default_str();
  app->add_option("--seeds", a->spec.seeds, "Seeds (one run each)")->capture_default_str();
  app->add_option("--d-head", a->spec.d_heads,
                  "Head sizes d_k (heads = d_model / d_k); 0: one head as wide as the model")
      ->capture_default_str();
  app->add_option("--widths", a->spec.widths, "Model widths d_model to sweep (default: --d-model)");
  app->add_option("--inits", a->spec.inits, "Initialisations to sweep: xavier | normal:<sigma> (default: --init)");
  app->add_option("--lrs", a->spec.lrs, "Peak learning rates to sweep (default: --lr)");
  app->add_option("--budget", a->spec.budget_s,
                  "Seconds the training may take (0: no limit): the grid is cut to fit a measured estimate, and the "
                  "cuts are printed")
      ->capture_default_str();
  app->add_flag("--no-store", a->no_store,
                "Do not store finished runs in DIR/runs/ (stored runs are not trained again when the sweep is re-run)");
  app->add_option("--jobs", a->spec.jobs,
                  "Runs trained at once (0: min(2, cores)); each gets --threads, or cores / jobs when 0. "
                  "The results do not depend on either")
      ->capture_default_str();
  app->add_option("--sample-prompt", a->spec.sample.prompt,
                  "Text task: the prompt of the one sample per policy on the page (\"\": no samples)")
      ->capture_default_str();
  app->add_flag("--no-ensemble", a->no_ensemble, "Skip the ensemble rule's evaluation of the adaptive runs");
  app->add_option("--out", a->out, "Output directory (created if missing)")->required();
  return {app, with_flag_names(app, [a] { return run_sweep(*a); },
                               {{"d_heads", "--d-head"}, {"budget_s", "--budget"}, {"store", "--out"}})};
}

}  // namespace sdpa::cli
