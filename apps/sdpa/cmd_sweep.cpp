// cmd_sweep.cpp — `sdpa sweep`: parse the grid, run nn::sweep (src/nn/sweep.hpp), print
// its table, write DIR/sweep.json and DIR/index.html (plots by sdpa_train_report.py)
// all-or-nothing, like `sdpa lab report`.
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "io/data_file.hpp"
#include "nn/sweep.hpp"

namespace sdpa::cli {
namespace {

struct SweepArgs {
  nn::SweepSpec spec = nn::SweepSpec::defaults();
  bool no_ensemble = false;
  std::string out;
};

int run_sweep(SweepArgs& a) {
  a.spec.ensemble = !a.no_ensemble;
  nn::validate(a.spec);
  const ReportDir dir(a.out);
  const std::string script = io::data_file("sdpa_train_report.py");  // before the training, not after
  const bool tty = stderr_is_terminal();
  const auto& s = a.spec;
  fmt::print(stderr, "sdpa sweep: {} runs ({} policies x {} head sizes x {} seeds)\n",
             s.policies.size() * s.d_heads.size() * s.seeds.size(), s.policies.size(), s.d_heads.size(),
             s.seeds.size());
  const double t0 = now_seconds();
  const nn::SweepResult result = nn::sweep(s, [&](const std::string& stage, std::size_t done, std::size_t total,
                                                  const std::string& policy, std::int64_t d_head, std::uint64_t seed) {
    if (tty)
      fmt::print(stderr, "\r\033[Ksdpa sweep: {} {}/{} done ({:.0f} s; last {} d_head={} seed={})", stage, done, total,
                 seconds_since(t0), policy, d_head, seed);
  });
  if (tty) fmt::print(stderr, "\r\033[K");
  fmt::print(stderr, "sdpa sweep: {} at a time, {} thread(s) each\n", result.jobs, result.threads);

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

}  // namespace

Command add_sweep(CLI::App& parent) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* app = parent.add_subcommand(
      "sweep",
      "Train every policy x head size x seed in this process (--jobs runs at a time); print a summary "
      "table and write DIR/index.html and DIR/sweep.json (docs/training.md)");
  add_train_options(app, a->spec.base, false);
  app->add_option("--policies", a->spec.policies, "Temperature policies")->capture_default_str();
  app->add_option("--seeds", a->spec.seeds, "Seeds (one run each)")->capture_default_str();
  app->add_option("--d-head", a->spec.d_heads, "Head sizes d_k (heads = d_model / d_k)")->capture_default_str();
  app->add_option("--jobs", a->spec.jobs,
                  "Runs trained at once (0: min(2, cores)); each gets --threads, or cores / jobs when 0. "
                  "The results do not depend on either")
      ->capture_default_str();
  app->add_flag("--no-ensemble", a->no_ensemble, "Skip the ensemble rule's evaluation of the adaptive runs");
  app->add_option("--out", a->out, "Output directory (created if missing)")->required();
  return {app, [a] { return run_sweep(*a); }};
}

}  // namespace sdpa::cli
