// cmd_lab.cpp — `sdpa lab <experiment>`: the seed documents' claims, measured.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "io/data_file.hpp"
#include "lab/experiments.hpp"
#include "sdpa/sdpa.hpp"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace sdpa::cli {
namespace {

struct Args {
  lab::Common common;
  std::string format = "table";
  std::vector<std::string> dists{"gaussian", "uniform", "rademacher", "student_t5"};
  std::int64_t max_dk = 4096;
  std::int64_t samples = 0;
};

struct Experiment {
  const char* name;
  const char* help;
  std::function<lab::Table(const Args&)> run;
};

std::vector<Experiment> experiments() {
  return {
      {"variance", "Var(q.k) = d_k for d_k = 1..4096 and four distributions; 1 after dividing by sqrt(d_k)",
       [](const Args& a) {
         std::vector<lab::Dist> ds;
         for (const auto& d : a.dists) ds.push_back(lab::parse_dist(d));
         return lab::variance(a.common, ds, a.max_dk);
       }},
      {"scaling", "dividing scores by c divides their variance by c^2",
       [](const Args& a) { return lab::scaling(a.common); }},
      {"general", "the general product-variance formula with non-zero means and other variances",
       [](const Args& a) { return lab::general_formula(a.common); }},
      {"matrix", "the 1111x111 matrix experiment (var ~ 111, ~ 1 scaled)",
       [](const Args& a) { return lab::matrix(a.common); }},
      {"puzzle", "why a 2x2 experiment printed a variance of 1.6", [](const Args& a) { return lab::puzzle(a.common); }},
      {"softmax", "the softmax values the seeds quote, from the library",
       [](const Args&) { return lab::softmax_numbers(); }},
      {"saturation", "max weight and entropy against d_k (scaled, unscaled) and against N",
       [](const Args& a) { return lab::saturation(a.common); }},
      {"gradients", "which gradients vanish without scaling, and the non-monotone softmax Jacobian",
       [](const Args& a) { return lab::gradients(a.common); }},
      {"alternatives", "1/sqrt(d_k) against 1, 1/d_k, 1/ln d_k and cosine similarity",
       [](const Args& a) { return lab::alternatives(a.common); }},
      {"projections", "q = xW_q, k = xW_k: Xavier, LayerNorm, and the self-attention diagonal",
       [](const Args& a) { return lab::projections(a.common); }},
  };
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) o += (ch == '"' || ch == '\\') ? std::string("\\") + ch : std::string(1, ch);
  return o;
}

// Runs every experiment, then the plotting script, and commits DIR/index.html and
// DIR/lab.json together; nothing is written to DIR unless all of it succeeded.
int run_report(const Args& a, const std::string& out_dir) {
  const ReportDir dir(out_dir);
  const std::string script = io::data_file("sdpa_lab_report.py");  // before the experiments, not after
  const std::string docs = io::data_file("lab.md");
  const std::string python = plot_python();
  const bool tty = stderr_is_terminal();
  const auto list = experiments();
  const double t_start = now_seconds();
  std::string doc = fmt::format("{{\"version\": \"{}\", \"isa\": \"{}\", \"seed\": {}, \"experiments\": [",
                                SDPA_VERSION_STRING, isa_name(active_isa()), a.common.seed);
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (tty) fmt::print(stderr, "\r\033[Ksdpa lab report: [{}/{}] {} ...", i + 1, list.size(), list[i].name);
    const double t0 = now_seconds();
    const lab::Table t = list[i].run(a);
    doc += fmt::format("{}{{\"name\": \"{}\", \"title\": \"{}\", \"seconds\": {:.3f}, \"rows\": {}}}", i ? ",\n" : "",
                       t.name, json_escape(t.title), seconds_since(t0), lab::render(t, lab::Format::json));
  }
  doc += fmt::format("], \"experiments_seconds\": {:.3f}}}\n", seconds_since(t_start));
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
  for (const auto& e : experiments()) {
    CLI::App* sub = lab->add_subcommand(e.name, e.help);
    sub->add_option("--seed", a->common.seed, "Random seed (results are deterministic for a seed)")
        ->capture_default_str();
    sub->add_option("--samples", a->samples, "Monte-Carlo samples, trials or repetitions (0: the experiment's default)")
        ->capture_default_str();
    sub->add_option("--threads", a->common.threads, "Threads (0 = all)")->capture_default_str();
    sub->add_option("--format", a->format, "table | json | csv")->capture_default_str();
    if (std::string(e.name) == "variance") {
      sub->add_option("--dist", a->dists, "Distributions: gaussian uniform rademacher student_t5")
          ->capture_default_str();
      sub->add_option("--max-dk", a->max_dk, "Largest d_k (powers of two from 1)")->capture_default_str();
    }
    sub->callback([a, chosen, run = e.run] {
      *chosen = [a, run] {
        if (a->samples < 0) throw Error("--samples: must be >= 0, got " + std::to_string(a->samples));
        a->common.samples = a->samples;
        const auto format = lab::parse_format(a->format);
        fmt::print("{}", lab::render(run(*a), format));
        return 0;
      };
    });
  }
  auto out_dir = std::make_shared<std::string>();
  CLI::App* report = lab->add_subcommand("report",
                                         "Run every experiment and write a self-contained DIR/index.html "
                                         "(plots by matplotlib) with the tables in DIR/lab.json");
  report->add_option("--out", *out_dir, "Output directory (created if missing)")->required();
  report->add_option("--seed", a->common.seed, "Random seed")->capture_default_str();
  report->add_option("--threads", a->common.threads, "Threads (0 = all)")->capture_default_str();
  report->callback([a, chosen, out_dir] { *chosen = [a, out_dir] { return run_report(*a, *out_dir); }; });
  return {lab, [chosen] { return (*chosen)(); }};
}

}  // namespace sdpa::cli
