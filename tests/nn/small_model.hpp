// small_model.hpp — the small model configuration the nn tests share: vocabulary 11,
// two heads, a policy by name.
#pragma once

#include <string>

#include "nn/model.hpp"
#include "nn/policy.hpp"

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
