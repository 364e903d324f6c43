// small_model.hpp — what the nn tests share: the small model configuration (vocabulary 11,
// two heads, a policy by name), a small text-task run on a corpus file, and error_of.
#pragma once

#include <functional>
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

// The message of the sdpa::Error f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sdpa::Error& e) {
    return e.what();
  }
  return "(no error)";
}
