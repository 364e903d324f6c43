// cmd_lab.cpp — `sdpa lab <experiment>`: the seed documents' claims, measured.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "io/data_file.hpp"
#include "lab/registry.hpp"
#include "sdpa/sdpa.hpp"

#include <cstdio>

namespace sdpa::cli {
namespace {

struct Args {
  lab::Settings settings;
  std::string format = "table";
  std::vector<std::string> dists = default_dists();  // --dist's words, parsed into settings.dists

  static std::vector<std::string> default_dists() {
    std::vector<std::string> names;
    for (lab::Dist d : lab::Settings{}.dists) names.emplace_back(lab::dist_name(d));
    return names;
  }
};

// Runs every experiment, then the plotting script, and commits DIR/index.html and
// DIR/lab.json together; nothing is written to DIR unless all of it succeeded.
int run_report(const Args& a, const std::string& out_dir) {
  lab::check(a.settings);  // before the directory and the script: a refused report leaves nothing
  const ReportDir dir(out_dir);
  const std::string script = io::data_file("sdpa_lab_report.py");  // before the experiments, not after
  const std::string docs = io::data_file("lab.md");
  const std::string python = plot_python();
  const bool tty = stderr_is_terminal();
  const double t_start = now_seconds();
  // lab.json: the lab library's report document; the CLI adds the progress line and the page.
  const nlohmann::ordered_json report =
      lab::report(a.settings, [tty](std::size_t i, std::size_t n, const lab::Experiment& e) {
        if (tty) fmt::print(stderr, "\r\033[Ksdpa lab report: [{}/{}] {} ...", i + 1, n, e.name);
      });
  const std::string doc = report.dump(1) + "\n";
  if (tty) fmt::print(stderr, "\r\033[Ksdpa lab report: plotting ...");

  io::OutputSet files;
  const std::vector<unsigned char> doc_bytes(doc.begin(), doc.end());
  const std::string data_path = files.add(out_dir + "/lab.json", doc_bytes);  // still a temporary name
  // Each section links to its derivation in docs/lab.md, installed beside the script.
  std::vector<unsigned char> html;
  try {
    html = run_plot_script("report", python, script, {"--data", data_path, "--docs", "file://" + docs});
  } catch (...) {
    if (tty) fmt::print(stderr, "\r\033[K");
    throw;
  }
  if (tty) fmt::print(stderr, "\r\033[K");
  files.add(out_dir + "/index.html", html);
  files.commit();
  fmt::print("sdpa lab report: wrote {}/index.html and {}/lab.json ({:.1f} s)\n", out_dir, out_dir,
             seconds_since(t_start));
  return 0;
}

}  // namespace

Command add_lab(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* lab = parent.add_subcommand(
      "lab", "Reproduce and stress the seed documents' claims about sqrt(d_k). Tables: --format table|json|csv.");
  lab->require_subcommand(1);
  auto chosen = std::make_shared<std::function<int()>>();
  for (const lab::Experiment& e : lab::experiments()) {
    CLI::App* sub = lab->add_subcommand(std::string(e.name), std::string(e.help));
    sub->add_option("--seed", a->settings.seed, "Random seed (results are deterministic for a seed)")
        ->capture_default_str();
    sub->add_option("--samples", a->settings.samples,
                    "Monte-Carlo samples, trials or repetitions (0: the experiment's default)")
        ->capture_default_str();
    sub->add_option("--threads", a->settings.threads, "Threads (0 = all)")->capture_default_str();
    sub->add_option("--format", a->format, "table | json | csv (the verdict closes the table and is in the JSON)")
        ->capture_default_str();
    if (e.takes_dists) {
      sub->add_option("--dist", a->dists, "Distributions: gaussian uniform rademacher student_t5")
          ->capture_default_str();
      sub->add_option("--max-dk", a->settings.max_dk, "Largest d_k (powers of two from 1)")->capture_default_str();
    }
    sub->callback([a, chosen, &e, sub] {
      *chosen = with_flag_names(sub, [a, &e] {
        a->settings.dists.clear();
        for (const auto& d : a->dists) a->settings.dists.push_back(lab::parse_dist(d));
        const auto format = lab::parse_format(a->format);
        fmt::print("{}", lab::render(lab::run(e, a->settings), format));
        return 0;
      });
    });
  }
  auto out_dir = std::make_shared<std::string>();
  CLI::App* report = lab->add_subcommand("report",
                                         "Run every experiment and write a self-contained DIR/index.html "
                                         "(plots by matplotlib) with the tables in DIR/lab.json");
  report->add_option("--out", *out_dir, "Output directory (created if missing)")->required();
  report->add_option("--seed", a->settings.seed, "Random seed")->capture_default_str();
  report->add_option("--threads", a->settings.threads, "Threads (0 = all)")->capture_default_str();
  report
      ->add_option("--samples", a->settings.samples,
                   "Samples for every experiment (0: each one's default; fewer is a quick draft whose verdicts "
                   "may not hold)")
      ->capture_default_str();
  report->callback([a, chosen, out_dir, report] {
    *chosen = with_flag_names(report, [a, out_dir] { return run_report(*a, *out_dir); });
  });
  return {lab, [chosen] { return (*chosen)(); }};
}

}  // namespace sdpa::cli
