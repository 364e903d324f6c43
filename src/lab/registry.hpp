// registry.hpp — the lab's experiments, listed once. The CLI (`sdpa lab <name>`,
// `sdpa lab report`), the Python bindings (`sdpa.lab`) and the report page all
// enumerate this list; a new experiment is one entry here plus its function.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "lab/experiments.hpp"

namespace sdpa::lab {

struct Experiment {
  std::string_view name;        // the one spelling: CLI subcommand, Python name, report anchor
  std::string_view heading;     // the report's section heading
  std::string_view seeds;       // which seed documents make the claim
  std::string_view help;        // one line for `sdpa lab --help`
  std::string_view claim;       // what is expected: the verdict's "expected"
  std::string_view discussion;  // what the numbers mean, for the report page
  bool takes_dists = false;     // whether Settings::dists and max_dk apply
  Table (*measure)(const Settings&);
};

/// Every experiment, in the report's order.
std::span<const Experiment> experiments();
/// The experiment called `name`; throws sdpa::Error listing the known names.
const Experiment& find_experiment(std::string_view name);
/// Throws sdpa::Error naming the setting when `s` cannot run: a negative sample or thread
/// count. run and report call it before any work; front ends need not repeat it.
void check(const Settings& s);
/// Runs it: its table, with the claim copied into the verdict's "expected".
Table run(const Experiment& e, const Settings& s);
Table run(std::string_view name, const Settings& s);

/// Called before experiment i of n starts (progress for a long report).
using ReportProgress = std::function<void(std::size_t i, std::size_t n, const Experiment& e)>;
/// The report's document (lab.json): the version, the ISA, the seed, and each experiment's
/// table (lab::to_json, with its verdict) beside what the page shows with it (heading, seeds,
/// discussion) and its seconds; then experiments_seconds. Runs every experiment in order.
nlohmann::ordered_json report(const Settings& s, const ReportProgress& progress = {});

}  // namespace sdpa::lab
