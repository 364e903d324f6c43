// small_model.hpp — the small model configurations the nn tests share: vocabulary 11, two
// heads, a policy by name; and a small text-task run on a corpus file.
#pragma once

#include <string>

#include "nn/model.hpp"
#include "nn/policy.hpp"
#include "nn/train.hpp"

inline sdpa::nn::ModelConfig small_model(const std::string& policy, sdpa::nn::i64 max_pos, sdpa::nn::i64 C,
                                         sdpa::nn::i64 L) {
  sdpa::nn::ModelConfig mc;
  mc.vocab = 11;
  mc.max_pos = max_pos;
  mc.C = C;
  mc.H = 2;
  mc.L = L;
  mc.policy = sdpa::nn::parse_policy(policy);
  return mc;
}

// A text-task run small enough for a test: width 32, two heads, one layer, contexts of 16.
inline sdpa::nn::TrainConfig small_text_run(const std::string& corpus) {
  sdpa::nn::TrainConfig c;
  c.task = "text";
  c.corpus = corpus;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 1;
  c.seq = 16;
  c.batch = 16;
  c.steps = 150;
  c.warmup = 10;
  c.lr = 1e-2;
  c.eval_size = 32;
  c.log_every = 50;
  c.threads = 1;
  return c;
}
