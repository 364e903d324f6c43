// cmd_key_scales.cpp — `sdpa key-scales`: which scales keep a trained model's keys closer in
// 8 bits, per key or per channel (nn::key_scales, src/nn/key_scales.hpp); prints the table,
// --json writes every head's rows.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "nn/key_scales.hpp"

namespace sdpa::cli {

Command add_key_scales(CLI::App& parent) {
  auto c = std::make_shared<nn::KeyScalesConfig>();
  auto resume = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  CLI::App* app = parent.add_subcommand(
      "key-scales",
      "Quantize the keys a text-task checkpoint's model computes on held-out text to int8 and fp8, with one scale "
      "per key or one per channel over groups of positions, and print each scheme's key, score and output error "
      "(docs/training.md)");
  app->add_option("--resume", *resume, "Checkpoint of a text-task run")->required();
  app->add_option("--corpus", c->corpus, "The text the checkpoint was trained on (default: the default corpus)");
  app->add_option("--set", c->set, "Held-out part: validation or test")->capture_default_str();
  app->add_option("--contexts", c->contexts, "Held-out contexts of the model's length")->capture_default_str();
  app->add_option("--groups", c->groups, "Positions sharing a channel's scale (one scheme each)")
      ->capture_default_str();
  app->add_option("--threads", c->threads, "Threads of the model's forward (0: all)")->capture_default_str();
  app->add_option("--json", *json, "Also write every head's figures to this file");
  return {app, with_flag_names(app, [c, resume, json] {
            const nn::KeyScalesResult r = nn::key_scales(nn::load_checkpoint(*resume), *c);
            if (!json->empty()) {
              const std::string text = nn::to_json(r, c->set).dump(1) + "\n";
              io::OutputSet files;
              files.add(*json, std::vector<unsigned char>(text.begin(), text.end()));
              files.commit();
            }
            fmt::print("{}", nn::key_scales_table(r));
            return 0;
          })};
}

}  // namespace sdpa::cli
