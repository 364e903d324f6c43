// registry.hpp — the lab's experiments, listed once. The CLI (`sdpa lab <name>`,
// `sdpa lab report`), the Python bindings (`sdpa.lab`) and the report page all
// enumerate this list; a new experiment is one entry here plus its function.
#pragma once

#include <span>
#include <string>
#include <string_view>

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
/// Runs it: its table, with the claim copied into the verdict's "expected".
Table run(const Experiment& e, const Settings& s);
Table run(std::string_view name, const Settings& s);

}  // namespace sdpa::lab
