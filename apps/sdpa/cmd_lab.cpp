// cmd_lab.cpp — `sdpa lab <experiment>`: the seed documents' claims, measured.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "lab/experiments.hpp"
#include "sdpa/error.hpp"

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
      {"scaling", "dividing scores by c divides their variance by c^2", [](const Args& a) { return lab::scaling(a.common); }},
      {"general", "the general product-variance formula with non-zero means and other variances",
       [](const Args& a) { return lab::general_formula(a.common); }},
      {"matrix", "the 1111x111 matrix experiment (var ~ 111, ~ 1 scaled)", [](const Args& a) { return lab::matrix(a.common); }},
      {"puzzle", "why a 2x2 experiment printed a variance of 1.6", [](const Args& a) { return lab::puzzle(a.common); }},
      {"softmax", "the softmax values the seeds quote, from the library", [](const Args&) { return lab::softmax_numbers(); }},
  };
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
    sub->add_option("--seed", a->common.seed, "Random seed (results are deterministic for a seed)")->capture_default_str();
    sub->add_option("--samples", a->samples, "Monte-Carlo samples, trials or repetitions (0: the experiment's default)")
        ->capture_default_str();
    sub->add_option("--threads", a->common.threads, "Threads (0 = all)")->capture_default_str();
    sub->add_option("--format", a->format, "table | json | csv")->capture_default_str();
    if (std::string(e.name) == "variance") {
      sub->add_option("--dist", a->dists, "Distributions: gaussian uniform rademacher student_t5")->capture_default_str();
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
  return {lab, [chosen] { return (*chosen)(); }};
}

}  // namespace sdpa::cli
