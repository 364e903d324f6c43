// cmd_sample.cpp — `sdpa sample`: continue a prompt with a text-task checkpoint
// (nn::sample, src/nn/sample.hpp) and print the text.
#include <memory>
#include <string>

#include <fmt/core.h>

#include "commands.hpp"
#include "common.hpp"
#include "nn/sample.hpp"

namespace sdpa::cli {

Command add_sample(CLI::App& parent) {
  auto c = std::make_shared<nn::SampleConfig>();
  auto resume = std::make_shared<std::string>();
  CLI::App* app = parent.add_subcommand(
      "sample",
      "Continue a prompt with a model trained by `sdpa train --task text --save CK`; prints the prompt and "
      "the generated characters (docs/training.md)");
  app->add_option("--resume", *resume, "Checkpoint of a text-task run")->required();
  app->add_option("--prompt", c->prompt, "Text to continue (its characters must be in the corpus)")
      ->capture_default_str();
  app->add_option("--tokens", c->tokens, "Characters to generate")->capture_default_str();
  app->add_option("--temperature", c->temperature, "Softmax temperature; 0: greedy")->capture_default_str();
  app->add_option("--seed", c->seed, "Seed of the sampling")->capture_default_str();
  return {app, with_flag_names(app, [c, resume] {
            const std::string text = nn::sample(nn::load_checkpoint(*resume), *c);
            fmt::print("{}\n", text);
            return 0;
          })};
}

}  // namespace sdpa::cli
