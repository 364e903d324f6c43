// test_training.cpp — tasks, policies, checkpoints and exact resumption.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unistd.h>
#include <set>

#include "nn/model.hpp"
#include "nn/policy.hpp"
#include "nn/tasks.hpp"
#include "nn/train.hpp"
#include "small_model.hpp"

namespace nn = sdpa::nn;
using nn::i64;

TEST(Tasks, DeterministicUnderSeed) {
  for (const char* name : {"mqar", "copy", "reverse", "sort", "lengthgen"}) {
    const nn::Task t = nn::parse_task(name, 16);
    nn::Rng a = nn::stream(7, 2, 5), b = nn::stream(7, 2, 5), c = nn::stream(8, 2, 5), d = nn::stream(7, 2, 6);
    const auto x = t.make(a, 8, 16, true), y = t.make(b, 8, 16, true), z = t.make(c, 8, 16, true),
               w = t.make(d, 8, 16, true);
    EXPECT_EQ(x.tokens, y.tokens) << name;
    EXPECT_EQ(x.targets, y.targets) << name;
    EXPECT_EQ(x.pos0, y.pos0) << name;
    EXPECT_NE(x.tokens, z.tokens) << name << ": another seed should give another batch";
    EXPECT_NE(x.tokens, w.tokens) << name << ": another step should give another batch";
  }
}

TEST(Tasks, MqarTargetsAreTheValuesOfTheQueriedKeys) {
  const nn::Task t = nn::parse_task("mqar", 32);
  nn::Rng r = nn::stream(1, 2, 1);
  const auto b = t.make(r, 16, 32, false);
  for (i64 s = 0; s < 16; ++s) {
    const int* tok = b.tokens.data() + s * 32;
    const int* tgt = b.targets.data() + s * 32;
    std::set<int> keys;
    for (int i = 0; i < 8; ++i) {
      EXPECT_TRUE(tok[2 * i] >= 1 && tok[2 * i] <= 32);
      EXPECT_TRUE(tok[2 * i + 1] >= 33 && tok[2 * i + 1] <= 64);
      keys.insert(tok[2 * i]);
    }
    EXPECT_EQ(keys.size(), 8u) << "keys are distinct";
    for (int j = 16; j < 32; ++j) {
      int want = -2;
      for (int i = 0; i < 8; ++i)
        if (tok[2 * i] == tok[j]) want = tok[2 * i + 1];
      EXPECT_EQ(tgt[j], want);
    }
  }
}

TEST(Tasks, SortReverseCopy) {
  for (const char* name : {"copy", "reverse", "sort"}) {
    const nn::Task t = nn::parse_task(name, 12);
    nn::Rng r = nn::stream(2, 2, 1);
    const auto b = t.make(r, 4, 12, false);
    for (i64 s = 0; s < 4; ++s) {
      std::vector<int> x(b.tokens.begin() + s * 12, b.tokens.begin() + s * 12 + 6), y;
      EXPECT_EQ(b.tokens[s * 12 + 6], nn::kSep);
      for (int i = 6; i < 12; ++i) y.push_back(b.targets[s * 12 + i]);
      if (std::string(name) == "reverse") std::reverse(x.begin(), x.end());
      if (std::string(name) == "sort") std::sort(x.begin(), x.end());
      EXPECT_EQ(x, y) << name;
      for (int i = 7; i < 12; ++i) EXPECT_EQ(b.tokens[s * 12 + i], y[i - 7]) << "teacher forcing";
    }
  }
}

TEST(Tasks, LengthgenIsSortWithShiftedPositions) {
  const nn::Task t = nn::parse_task("lengthgen", 8);
  EXPECT_EQ(t.max_positions(), 16);
  nn::Rng r = nn::stream(3, 2, 1);
  const auto train = t.make(r, 64, 8, true), longer = t.make(r, 4, 16, false);
  std::set<int> offsets(train.pos0.begin(), train.pos0.end());
  EXPECT_EQ(*offsets.begin(), 0);
  EXPECT_EQ(*offsets.rbegin(), 8) << "offsets cover [0, T] so every position is trained";
  for (int s = 0; s < 4; ++s) {  // the long evaluation: sorted copies of 8 symbols, at positions 0..15
    EXPECT_EQ(longer.pos0[s], 0);
    std::vector<int> x(longer.tokens.begin() + s * 16, longer.tokens.begin() + s * 16 + 8), y;
    for (int i = 8; i < 16; ++i) y.push_back(longer.targets[s * 16 + i]);
    std::sort(x.begin(), x.end());
    EXPECT_EQ(x, y);
  }
}

TEST(Tasks, BadArgumentsThrow) {
  EXPECT_THROW(nn::parse_task("nope", 16), sdpa::Error);
  EXPECT_THROW(nn::parse_task("copy", 7), sdpa::Error);
  EXPECT_THROW(nn::parse_task("mqar", 4), sdpa::Error);
}

TEST(Policies, Parse) {
  for (const auto& n : nn::default_policies()) EXPECT_EQ(nn::parse_policy(n).name(), n);
  EXPECT_DOUBLE_EQ(nn::parse_policy("fixed:0.5").value, 0.5);
  EXPECT_THROW(nn::parse_policy("fixed:"), sdpa::Error);
  EXPECT_THROW(nn::parse_policy("fixed:-1"), sdpa::Error);
  EXPECT_THROW(nn::parse_policy("fixed:nan"), sdpa::Error);
  EXPECT_THROW(nn::parse_policy("adaptiv"), sdpa::Error);
}

TEST(Policies, AdaptiveFormulaAtTheSeedNotesAssumptions) {
  // Unit-variance X and σ_W² = 1/d_x give back 1/√d_k.
  EXPECT_NEAR(nn::adaptive_beta(64, 1.0, 1.0 / 8, 1.0 / 8, 16), 0.25, 1e-15);
  // Doubling σ_Wq doubles Var(q) and halves β; doubling σ_X quarters it.
  EXPECT_NEAR(nn::adaptive_beta(64, 1.0, 2.0 / 8, 1.0 / 8, 16), 0.125, 1e-15);
  EXPECT_NEAR(nn::adaptive_beta(64, 2.0, 1.0 / 8, 1.0 / 8, 16), 0.0625, 1e-15);
}

// The adaptive policy inside the model measures σ_X and σ_W: with W_q, W_k set to ±a
// (σ exactly a) and LayerNorm output of σ ≈ 1, β must be 1/(C a_q a_k √D).
TEST(Policies, AdaptiveBetaMatchesItsFormulaOnKnownSigma) {
  const nn::ModelConfig mc = small_model("adaptive", 8, 16, 1);
  nn::Model<float> m(mc);
  const double aq[2] = {0.3, 0.05}, ak[2] = {0.1, 0.2};
  const i64 C = 16, D = 8;
  float* w = m.params.data() + m.layout.layers[0].wqkv;
  for (i64 r = 0; r < C; ++r)
    for (i64 h = 0; h < 2; ++h)
      for (i64 d = 0; d < D; ++d) {
        const float sign = ((r + d) % 2) ? 1.0f : -1.0f;
        w[r * 3 * C + h * D + d] = static_cast<float>(sign * aq[h]);
        w[r * 3 * C + C + h * D + d] = static_cast<float>(sign * ak[h]);
      }
  const std::vector<int> tok{1, 2, 3, 4, 5, 6, 7, 8}, tgt(8, 1);
  nn::Stats st;
  m.forward(tok.data(), tgt.data(), nullptr, 1, 8, true, &st);
  // LayerNorm output: σ = √(var/(var + 1e-5)) per row, a little below 1 for the small
  // (σ ≈ 0.03) embeddings at initialisation
  EXPECT_GT(st.sigma_x[0], 0.97);
  EXPECT_LE(st.sigma_x[0], 1.0);
  const double sx2 = st.sigma_x[0] * st.sigma_x[0];
  for (int h = 0; h < 2; ++h) {
    EXPECT_NEAR(st.sigma_wq[h], aq[h], 1e-6);
    EXPECT_NEAR(st.sigma_wk[h], ak[h], 1e-6);
    // float weights: σ_W exact to ~1e-7 relative
    const double want = 1.0 / (C * sx2 * aq[h] * ak[h] * std::sqrt(static_cast<double>(D)));
    EXPECT_NEAR(st.beta[h], want, want * 1e-5);
    EXPECT_NEAR(st.beta[h], nn::adaptive_beta(C, st.sigma_x[0], st.sigma_wq[h], st.sigma_wk[h], D), want * 1e-12);
  }
}

TEST(Policies, AdaptiveScoresIsTheInverseSmoothedScoreStd) {
  const nn::ModelConfig mc = small_model("adaptive_scores", 8, 16, 1);
  nn::Model<float> m(mc);
  const std::vector<int> tok{1, 2, 3, 4, 5, 6, 7, 8}, tgt(8, 1), tok2{8, 3, 3, 9, 1, 2, 10, 4};
  nn::Stats s1, s2;
  m.forward(tok.data(), tgt.data(), nullptr, 1, 8, true, &s1);
  for (int h = 0; h < 2; ++h) EXPECT_NEAR(s1.beta[h], 1.0 / s1.score_std[h], 1e-12);  // first step: no history
  m.forward(tok2.data(), tgt.data(), nullptr, 1, 8, true, &s2);
  for (int h = 0; h < 2; ++h) {
    const double ema = nn::kScoreEma * s1.score_std[h] + (1 - nn::kScoreEma) * s2.score_std[h];
    EXPECT_NEAR(s2.beta[h], 1.0 / ema, 1e-9 / ema);
  }
}

namespace {

nn::TrainConfig tiny(const std::string& policy) {
  nn::TrainConfig c;
  c.policy = policy;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.seq = 8;
  c.batch = 4;
  c.steps = 12;
  c.warmup = 3;
  c.log_every = 1;
  c.eval_size = 8;
  return c;
}

// The logged steps as `sdpa train` prints them, less the timing fields (which differ from
// run to run; nothing else may).
std::vector<std::string> run(const nn::TrainConfig& c) {
  std::vector<std::string> lines;
  nn::TrainHooks hooks;
  hooks.on_log = [&](const nn::StepRecord& r) {
    auto j = nn::to_json(r, c.heads);
    j.erase("tokens_per_s");
    j.erase("elapsed_s");
    lines.push_back(j.dump());
  };
  nn::train(c, hooks);
  return lines;
}

std::string temp_path(const char* name) {
  return ::testing::TempDir() + "/sdpa_nn_" + name + "_" + std::to_string(::getpid());
}

}  // namespace

TEST(Checkpoint, ResumeContinuesBitForBit) {
  for (const char* policy : {"inv_sqrt_dk", "learned", "adaptive_scores"}) {
    const std::string path = temp_path("resume");
    nn::TrainConfig full = tiny(policy);
    const auto a = run(full);
    ASSERT_EQ(a.size(), 12u);
    nn::TrainConfig first = full;
    first.stop_at = 5;
    first.save = path;
    const auto b = run(first);
    ASSERT_EQ(b.size(), 5u);
    nn::TrainConfig second = full;
    second.resume = path;
    const auto c = run(second);
    ASSERT_EQ(c.size(), 7u);
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(a[i], b[i]) << policy;
    for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(a[5 + i], c[i]) << policy << " step " << 6 + i;
    std::remove(path.c_str());
  }
}

// The projections split rows between threads and the attention kernel splits items; every
// element is still summed in one order by one thread, so 1, 2 and 3 threads (uneven
// shares, remainder tiles of other heights) must give the same parameters, Adam moments,
// losses and statistics, bit for bit. ctest runs this once per ISA (SDPA_ISA, nn.threads.*).
TEST(Training, SameBitsForAnyThreadCount) {
  if (const char* env = std::getenv("SDPA_ISA")) {
    EXPECT_STREQ(sdpa::isa_name(sdpa::active_isa()), env);
  }
  std::vector<std::vector<std::string>> lines;
  std::vector<nn::Checkpoint> ends;
  for (int threads : {1, 2, 3}) {
    nn::TrainConfig c = tiny("learned");  // learned: ∂L/∂θ through the attention backward too
    c.d_model = 40;                       // 120 and 160 columns: whole tiles, one-vector blocks, tails
    c.batch = 5;                          // 40 rows: 40, 20 + 20, 13 + 13 + 14 per thread
    c.steps = 6;
    c.threads = threads;
    c.save = temp_path(("threads" + std::to_string(threads)).c_str());
    lines.push_back(run(c));
    ends.push_back(nn::load_checkpoint(c.save));
    std::remove(c.save.c_str());
  }
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (std::size_t t = 1; t < ends.size(); ++t) {
    EXPECT_EQ(lines[0], lines[t]) << t + 1 << " threads";
    EXPECT_TRUE(same_bits(ends[0].params, ends[t].params)) << t + 1 << " threads";
    EXPECT_TRUE(same_bits(ends[0].m, ends[t].m)) << t + 1 << " threads";
    EXPECT_TRUE(same_bits(ends[0].v, ends[t].v)) << t + 1 << " threads";
  }
  EXPECT_EQ(ends[0].step, 6);
  EXPECT_EQ(lines[0].size(), 6u);
}

TEST(Checkpoint, RoundTripAndCorruption) {
  nn::Checkpoint c{"task=x;seed=1", 42, {1.f, 2.f, 3.f}, {0.1f, 0.2f, 0.3f}, {4.f, 5.f, 6.f}, {0.5, 0.25}};
  const auto bytes = nn::encode_checkpoint(c);
  const auto d = nn::decode_checkpoint(bytes, "ck");
  EXPECT_EQ(d.identity, c.identity);
  EXPECT_EQ(d.step, 42);
  EXPECT_EQ(d.params, c.params);
  EXPECT_EQ(d.m, c.m);
  EXPECT_EQ(d.v, c.v);
  EXPECT_EQ(d.score_ema, c.score_ema);
  auto expect_error = [](const std::vector<unsigned char>& b, const std::string& fragment) {
    try {
      nn::decode_checkpoint(b, "ck");
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const sdpa::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  for (std::size_t i = 24; i < bytes.size(); i += 7) {  // every flipped payload byte is caught
    auto bad = bytes;
    bad[i] ^= 0x10;
    expect_error(bad, i + 8 < bytes.size() ? "checksum" : "checksum");
  }
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{23}, bytes.size() - 1, bytes.size() / 2})
    expect_error(std::vector<unsigned char>(bytes.begin(), bytes.begin() + static_cast<long>(n)),
                 n < 24 ? "magic" : "truncated");
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  expect_error(bad_magic, "magic");
  auto bad_version = bytes;
  bad_version[8] = 99;
  expect_error(bad_version, "version 99");
  auto padded = bytes;
  padded.push_back(0);
  expect_error(padded, "truncated or padded");
}

TEST(Checkpoint, MismatchedRunIsRefused) {
  const std::string path = temp_path("mismatch");
  nn::TrainConfig c = tiny("inv_sqrt_dk");
  c.stop_at = 2;
  c.save = path;
  run(c);
  nn::TrainConfig other = tiny("adaptive");
  other.resume = path;
  try {
    run(other);
    ADD_FAILURE() << "resuming another policy's checkpoint should fail";
  } catch (const sdpa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("policy=inv_sqrt_dk"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(Training, LossFallsOnMqar) {
  nn::TrainConfig c = tiny("inv_sqrt_dk");
  c.task = "mqar";
  c.steps = 150;
  c.lr = 1e-2;
  nn::TrainSummary s;
  double first = -1;
  nn::TrainHooks hooks;
  hooks.on_log = [&](const nn::StepRecord& r) {
    if (first < 0) first = r.loss;
  };
  s = nn::train(c, hooks);
  EXPECT_FALSE(s.diverged);
  EXPECT_LT(s.loss, 0.8 * first) << "150 steps should lower the loss from " << first;
}
