// nn/sample.hpp — generating text from a text-task checkpoint: the library behind `sdpa sample`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/model.hpp"
#include "nn/train.hpp"

namespace sdpa::nn {

struct SampleConfig {
  std::string prompt = "\n";
  i64 tokens = 200;          // characters to generate
  double temperature = 1.0;  // 0: greedy (the most likely character each step)
  std::uint64_t seed = 1;    // the sampling stream (unused when greedy)
};

/// The model a text-task checkpoint holds, rebuilt from its identity, with the alphabet and
/// the corpus hash (16 hex digits) the identity names.
struct TextModel {
  Model<float> model;
  std::vector<char32_t> alphabet;
  std::string corpus_hash;
};
/// Throws sdpa::Error ("resume: …") for a checkpoint that is not the text task's or whose
/// parameters do not fit the model its identity describes.
TextModel load_text_model(const Checkpoint& checkpoint);

/// Continues `prompt` by `tokens` characters with the model a text-task checkpoint holds;
/// returns the prompt and its continuation. The model sees at most the last seq characters
/// (its context length). Throws sdpa::Error for a checkpoint that is not the text task's,
/// a prompt with a character outside the corpus's alphabet, or bad arguments (named).
std::string sample(const Checkpoint& checkpoint, const SampleConfig& config);

}  // namespace sdpa::nn
