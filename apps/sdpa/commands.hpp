// commands.hpp — one entry per subcommand; each lives in its own cmd_*.cpp.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace sdpa::nn {
struct TrainConfig;
}

namespace sdpa::cli {

/// A registered subcommand: its CLI11 node and what runs when it was chosen.
/// run() returns the exit code and throws sdpa::Error for bad input.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_attention(CLI::App& parent);  // cmd_attention.cpp
Command add_decode(CLI::App& parent);     // cmd_decode.cpp
Command add_check(CLI::App& parent);      // cmd_check.cpp
Command add_lab(CLI::App& parent);        // cmd_lab.cpp
Command add_bench(CLI::App& parent);      // cmd_bench.cpp
Command add_train(CLI::App& parent);      // cmd_train.cpp
Command add_sweep(CLI::App& parent);      // cmd_sweep.cpp
Command add_sample(CLI::App& parent);     // cmd_sample.cpp
Command add_key_scales(CLI::App& parent);  // cmd_key_scales.cpp

/// The model, task and optimiser options `sdpa train` and `sdpa sweep` share
/// (single: also --policy, --heads and --seed, which a sweep takes as lists).
void add_train_options(CLI::App* app, nn::TrainConfig& c, bool single);  // cmd_train.cpp

}  // namespace sdpa::cli
