// commands.hpp — one entry per subcommand; each lives in its own cmd_*.cpp.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace sdpa::cli {

/// A registered subcommand: its CLI11 node and what runs when it was chosen.
/// run() returns the exit code and throws sdpa::Error for bad input.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_attention(CLI::App& parent);  // cmd_attention.cpp
Command add_check(CLI::App& parent);      // cmd_check.cpp
Command add_lab(CLI::App& parent);        // cmd_lab.cpp
Command add_bench(CLI::App& parent);      // cmd_bench.cpp

}  // namespace sdpa::cli
