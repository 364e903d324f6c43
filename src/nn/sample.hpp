// nn/sample.hpp — generating text from a text-task checkpoint: the library behind `sdpa sample`.
#pragma once

#include <cstdint>
#include <string>

#include "nn/train.hpp"

namespace sdpa::nn {

struct SampleConfig {
  std::string prompt = "\n";
  i64 tokens = 200;          // characters to generate
  double temperature = 1.0;  // 0: greedy (the most likely character each step)
  std::uint64_t seed = 1;    // the sampling stream (unused when greedy)
};

/// Continues `prompt` by `tokens` characters with the model a text-task checkpoint holds;
/// returns the prompt and its continuation. The model sees at most the last seq characters
/// (its context length). Throws sdpa::Error for a checkpoint that is not the text task's,
/// a prompt with a character outside the corpus's alphabet, or bad arguments (named).
std::string sample(const Checkpoint& checkpoint, const SampleConfig& config);

}  // namespace sdpa::nn
