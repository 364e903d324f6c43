// test_sweep.cpp — nn::sweep: the grid, the statistics over seeds, the ensemble rule, and
// results that do not depend on how many runs train at once.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nn/sweep.hpp"

namespace nn = sdpa::nn;
using nn::i64;

namespace {

nn::SweepSpec tiny_sweep() {
  nn::SweepSpec s = nn::SweepSpec::defaults();
  s.base.d_model = 16;
  s.base.layers = 1;
  s.base.seq = 8;
  s.base.batch = 4;
  s.base.steps = 8;
  s.base.warmup = 2;
  s.base.eval_size = 8;
  s.base.log_every = 4;
  s.policies = {"inv_sqrt_dk", "adaptive"};
  s.seeds = {1, 2};
  s.d_heads = {8};
  return s;
}

// sweep.json without the wall-clock fields, which differ from run to run.
nlohmann::ordered_json without_timing(nlohmann::ordered_json j) {
  for (const char* k : {"seconds", "train_seconds", "table", "jobs", "threads", "ranks"}) j.erase(k);
  for (auto& run : j["runs"]) {
    run["final"].erase("seconds");
    run["final"].erase("tokens_per_s");
    for (auto& row : run["log"]) {
      row.erase("tokens_per_s");
      row.erase("elapsed_s");
    }
  }
  return j;
}

// nn::SweepShare's hooks between threads of this process, standing in for MPI ranks
// (src/distributed/sweep_share.cpp gives the same over MPI): each hook waits for every rank.
class ThreadRanks {
 public:
  explicit ThreadRanks(int ranks) : ranks_(ranks), texts_(static_cast<std::size_t>(ranks)),
                                    runs_(static_cast<std::size_t>(ranks)) {}
  nn::SweepShare share(int rank) {
    nn::SweepShare s;
    s.rank = rank, s.ranks = ranks_;
    s.agree = [this, rank](const std::string& what, const std::string& text) {
      texts_[static_cast<std::size_t>(rank)] = text;
      wait_all();
      for (const auto& t : texts_)
        if (t != texts_[0]) throw sdpa::Error("ranks disagree on " + what);
    };
    s.gather = [this, rank](const std::vector<std::string>& mine) {
      runs_[static_cast<std::size_t>(rank)] = mine;
      wait_all();
      std::vector<std::string> all;
      if (rank == 0)
        for (const auto& r : runs_) all.insert(all.end(), r.begin(), r.end());
      return all;
    };
    return s;
  }

 private:
  void wait_all() {  // a reusable barrier
    std::unique_lock<std::mutex> g(lock_);
    const int round = round_;
    if (++arrived_ == ranks_) {
      arrived_ = 0, ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(g, [&] { return round_ != round; });
    }
  }
  int ranks_, arrived_ = 0, round_ = 0;
  std::mutex lock_;
  std::condition_variable cv_;
  std::vector<std::string> texts_;
  std::vector<std::vector<std::string>> runs_;
};

}  // namespace

TEST(Sweep, SpreadIsTheSampleStatistic) {
  const nn::Spread s = nn::spread({1.0, 2.0, 4.0});
  EXPECT_DOUBLE_EQ(s.mean, 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(
      s.sd,
      std::sqrt(((1 - 7.0 / 3) * (1 - 7.0 / 3) + (2 - 7.0 / 3) * (2 - 7.0 / 3) + (4 - 7.0 / 3) * (4 - 7.0 / 3)) / 2.0));
  EXPECT_EQ(s.n, 3);
  EXPECT_TRUE(std::isnan(nn::spread({5.0}).sd)) << "one seed has no spread";
  EXPECT_EQ(nn::spread({5.0}).mean, 5.0);
  EXPECT_TRUE(std::isnan(nn::spread({}).mean));
}

TEST(Sweep, GridSummaryAndEnsembleRule) {
  const nn::SweepSpec spec = tiny_sweep();
  std::vector<std::string> stages;
  const nn::SweepResult r = nn::sweep(spec, [&](const nn::SweepStatus& st) {
    EXPECT_LE(st.done, st.total);
    if (st.finished) stages.push_back(st.stage);
  });
  ASSERT_EQ(r.runs.size(), 4u);  // 2 policies x 1 head size x 2 seeds, grid order
  EXPECT_EQ(r.runs[0].policy, "inv_sqrt_dk");
  EXPECT_EQ(r.runs[1].seed, 2u);
  EXPECT_EQ(r.runs[2].policy, "adaptive");
  for (const auto& run : r.runs) {
    EXPECT_EQ(run.summary.heads, 2);
    EXPECT_EQ(run.summary.steps_done, 8);
    ASSERT_EQ(run.log.size(), 3u) << "steps 1, 4 and 8 are logged";
    EXPECT_EQ(run.log.back().step, 8);
  }
  EXPECT_EQ(stages.size(), 4u + 4u) << "4 training runs, then 2 adaptive runs x 2 evaluations";

  ASSERT_EQ(r.summary.size(), 2u);
  for (const auto& cell : r.summary) {
    std::vector<double> loss;
    for (const auto& run : r.runs)
      if (run.policy == cell.policy) loss.push_back(run.summary.eval_loss);
    EXPECT_EQ(cell.runs, 2);
    EXPECT_DOUBLE_EQ(cell.eval_loss.mean, nn::spread(loss).mean) << cell.policy;
    EXPECT_DOUBLE_EQ(cell.eval_loss.sd, nn::spread(loss).sd) << cell.policy;
  }

  // The ensemble rule: the best adaptive run on the validation set lends its β to both.
  ASSERT_EQ(r.ensemble.size(), 2u);
  const auto& a1 = r.runs[2].summary;
  const auto& a2 = r.runs[3].summary;
  const std::uint64_t best = a1.eval_loss <= a2.eval_loss ? 1 : 2;
  for (const auto& e : r.ensemble) {
    EXPECT_EQ(e.best_seed, best);
    EXPECT_EQ(e.ensemble_beta, (best == 1 ? a1 : a2).beta);
    EXPECT_TRUE(std::isfinite(e.own_test_loss) && std::isfinite(e.ensemble_test_loss));
  }
  // (The best run scored with its own β and with the ensemble β differ a little: the
  // adaptive β of an evaluation is measured from the final weights, the summary's β before
  // the last update.)
  const nlohmann::ordered_json j = nn::to_json(r);
  EXPECT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["runs"][0]["log"].size(), 3u);
  EXPECT_EQ(j["ensemble"].size(), 2u);
  EXPECT_EQ(j["summary"][0]["eval_loss_mean"].get<double>(), r.summary[0].eval_loss.mean);
  EXPECT_NE(nn::summary_table(r).find("ensemble rule"), std::string::npos);
}

TEST(Sweep, ResultsDoNotDependOnJobsOrThreads) {
  nn::SweepSpec a = tiny_sweep(), b = tiny_sweep();
  a.jobs = 1;
  a.base.threads = 1;
  b.jobs = 2;
  b.base.threads = 2;
  const auto ra = nn::sweep(a), rb = nn::sweep(b);
  EXPECT_EQ(rb.jobs, 2);
  EXPECT_EQ(without_timing(nn::to_json(ra)), without_timing(nn::to_json(rb)));
}

// A sweep shared by 3 ranks (threads here, MPI ranks under `mpirun sdpa sweep`): each
// trains its runs, rank 0 gets them (the adaptive runs' final states too, for the ensemble
// rule) and reports; the result equals one process's, and the other ranks report nothing.
TEST(Sweep, SharedSweepEqualsOneProcess) {
  nn::SweepSpec spec = tiny_sweep();
  spec.seeds = {1, 2, 3};  // 6 runs: rank 2 of 3 gets runs 2 and 5
  spec.jobs = 1;
  spec.base.threads = 1;
  const auto whole = nn::sweep(spec);
  ThreadRanks ranks(3);
  std::vector<nn::SweepResult> part(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        part[static_cast<std::size_t>(r)] = nn::sweep(spec, {}, ranks.share(r));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  ASSERT_TRUE(part[0].complete);
  EXPECT_EQ(part[0].ranks, 3);
  EXPECT_FALSE(part[1].complete);
  EXPECT_EQ(part[1].runs[1].log.size(), whole.runs[1].log.size()) << "rank 1 trained run 1";
  EXPECT_TRUE(part[1].runs[0].log.empty()) << "rank 1 did not train run 0";
  ASSERT_EQ(part[0].ensemble.size(), 3u);
  EXPECT_EQ(without_timing(nn::to_json(whole)), without_timing(nn::to_json(part[0])));
}

// Ranks given different grids refuse together, before training.
TEST(Sweep, SharedSweepRefusesRanksThatDisagree) {
  ThreadRanks ranks(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      nn::SweepSpec spec = tiny_sweep();
      spec.seeds = {1, r == 0 ? std::uint64_t{2} : std::uint64_t{3}};
      try {
        nn::sweep(spec, {}, ranks.share(r));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_NE(e.find("ranks disagree on the sweep's grid"), std::string::npos) << e;
}

TEST(Sweep, BadSpecsAreRefusedBeforeTraining) {
  auto expect = [](nn::SweepSpec s, const std::string& fragment) {
    try {
      nn::sweep(s);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const sdpa::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  nn::SweepSpec s = tiny_sweep();
  s.d_heads = {5};
  expect(s, "does not divide");
  s = tiny_sweep();
  s.policies = {};
  expect(s, "at least one value");
  s = tiny_sweep();
  s.policies = {"warm"};
  expect(s, "policies: ");
  s = tiny_sweep();
  s.inits = {"xavier", "normal:-1"};
  expect(s, "normal:-1");
  s = tiny_sweep();
  s.widths = {16, 20};
  expect(s, "d_heads: 8 does not divide the width 20");
  s = tiny_sweep();
  s.base.eval_size = 0;  // refused by the run itself: the error names the run
  expect(s, "training of policy inv_sqrt_dk d_model 16 d_head 8 init xavier lr 0.003 seed 1 failed");
  s = tiny_sweep();
  s.budget_s = 1e-6;  // no run can train in a microsecond
  expect(s, "budget_s: 1e-06 s is too little");
}

// Widths, the one-head axis (d_head 0), inits and learning rates: the grid's order, each
// run's configuration, and the paired differences against inv_sqrt_dk.
TEST(Sweep, GridAxesAndPairedDifferences) {
  nn::SweepSpec s = tiny_sweep();
  s.widths = {8, 16};
  s.d_heads = {0, 4};
  s.inits = {"xavier", "normal:0.2"};
  s.lrs = {3e-3};
  s.policies = {"inv_sqrt_dk", "inv_dk"};
  s.seeds = {1, 2, 3};
  s.base.steps = 4;
  const nn::SweepResult r = nn::sweep(s);
  ASSERT_EQ(r.runs.size(), 2u * 2 * 2 * 2 * 3);
  EXPECT_EQ(r.runs[0].d_model, 8);
  EXPECT_EQ(r.runs[0].summary.heads, 1) << "d_head 0: one head as wide as the model";
  EXPECT_EQ(r.runs[0].d_head, 8);
  EXPECT_EQ(r.runs[12].summary.heads, 2) << "width 8, d_k 4";
  EXPECT_EQ(r.runs[6].init, "normal:0.2");
  EXPECT_EQ(r.runs[24].d_model, 16);
  EXPECT_EQ(r.runs[24].summary.heads, 1);
  ASSERT_EQ(r.summary.size(), 16u);
  for (std::size_t k = 0; k < r.summary.size(); ++k) {
    const nn::SweepCell& c = r.summary[k];
    if (c.policy == "inv_sqrt_dk") {
      EXPECT_EQ(c.paired_difference.n, 0);
      continue;
    }
    // the cell's three runs follow inv_sqrt_dk's three in grid order, seed by seed
    const std::size_t first = 3 * k;
    std::vector<double> d;
    for (std::size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(r.runs[first + i].policy, "inv_dk");
      ASSERT_EQ(r.runs[first + i - 3].seed, r.runs[first + i].seed);
      d.push_back(r.runs[first + i].summary.eval_loss - r.runs[first + i - 3].summary.eval_loss);
    }
    EXPECT_EQ(c.paired_difference.n, 3);
    EXPECT_DOUBLE_EQ(c.paired_difference.mean, nn::spread(d).mean);
    // t(0.975, 2) = 4.303: the 95 % interval of a mean of three
    EXPECT_NEAR(c.paired_difference.ci95, 4.303 * nn::spread(d).sd / std::sqrt(3.0), 1e-12);
  }
  EXPECT_NE(nn::summary_table(r).find("Δ vs inv_sqrt_dk"), std::string::npos);
  // d_head 0 at a width also named as a head size is one configuration, run once
  s.widths = {8};
  s.d_heads = {8, 0};
  s.inits = {};
  EXPECT_EQ(nn::sweep(s).runs.size(), 2u * 3);
}

// A learning-rate sweep names each policy's best lr (lowest mean held-out loss) per
// configuration, and pairs every other lr with it seed by seed.
TEST(Sweep, LearningRateSweepPairsEachLrWithThePolicysBest) {
  nn::SweepSpec s = tiny_sweep();
  s.lrs = {1e-3, 3e-3, 1e-2};
  s.d_heads = {8};
  s.policies = {"inv_sqrt_dk", "qk_norm"};
  s.seeds = {1, 2, 3};
  s.base.steps = 4;
  const nn::SweepResult r = nn::sweep(s);
  ASSERT_EQ(r.summary.size(), 2u * 3);
  for (const std::string policy : {"inv_sqrt_dk", "qk_norm"}) {
    std::vector<const nn::SweepCell*> cells;
    for (const auto& c : r.summary)
      if (c.policy == policy) cells.push_back(&c);
    ASSERT_EQ(cells.size(), 3u);
    const nn::SweepCell* best = cells[0];
    for (const auto* c : cells)
      if (c->eval_loss.mean < best->eval_loss.mean) best = c;
    auto loss = [&](double lr, std::uint64_t seed) {
      for (const auto& run : r.runs)
        if (run.policy == policy && run.lr == lr && run.seed == seed) return run.summary.eval_loss;
      ADD_FAILURE() << "no run";
      return 0.0;
    };
    for (const auto* c : cells) {
      EXPECT_EQ(c->best_lr, c == best) << policy << " lr " << c->lr;
      if (c == best) {
        EXPECT_EQ(c->vs_best_lr.n, 0);
        continue;
      }
      std::vector<double> d;
      for (std::uint64_t seed : {1, 2, 3}) d.push_back(loss(c->lr, seed) - loss(best->lr, seed));
      EXPECT_EQ(c->vs_best_lr.n, 3);
      EXPECT_DOUBLE_EQ(c->vs_best_lr.mean, nn::spread(d).mean);
      EXPECT_GT(c->vs_best_lr.mean, 0) << "the best lr has the lowest mean";
    }
  }
  EXPECT_NE(nn::summary_table(r).find("vs best lr"), std::string::npos);
  s.lrs = {3e-3};  // one lr: nothing to compare
  for (const auto& c : nn::sweep(s).summary) EXPECT_FALSE(c.best_lr || c.vs_best_lr.n);
}

// An interrupted sweep (here: its progress callback throws after two finished runs) keeps
// the runs it stored; the re-run loads them, trains only the others, and gives the same
// sweep.json as a sweep never interrupted.
TEST(Sweep, InterruptedSweepResumesFromItsStore) {
  char tmpl[] = "/tmp/sdpa_sweep_store.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  nn::SweepSpec s = tiny_sweep();
  s.jobs = 1;  // the callback's exception leaves through the calling thread
  const nn::SweepResult whole = nn::sweep(s);
  s.store = dir + "/runs";
  struct Interrupt {};
  EXPECT_THROW(nn::sweep(s,
                         [](const nn::SweepStatus& st) {
                           if (st.finished && st.done == 2) throw Interrupt{};
                         }),
               Interrupt);
  std::size_t stored_before = 0, steps_trained = 0;
  const nn::SweepResult resumed = nn::sweep(s, [&](const nn::SweepStatus& st) {
    if (st.stage != "training") return;
    stored_before = st.stored;
    if (!st.finished) ++steps_trained;
  });
  EXPECT_EQ(stored_before, 2u);
  EXPECT_EQ(steps_trained, 2u * 8) << "only the two runs not stored are trained";
  EXPECT_TRUE(resumed.runs[0].from_store && resumed.runs[1].from_store && !resumed.runs[2].from_store);
  auto strip = [](nlohmann::ordered_json j) {
    j = without_timing(std::move(j));
    j.erase("runs_from_store");
    return j;
  };
  EXPECT_EQ(strip(nn::to_json(whole)), strip(nn::to_json(resumed)));
  // a third run trains nothing; a store of another configuration is refused
  steps_trained = 0;
  nn::sweep(s, [&](const nn::SweepStatus& st) { steps_trained += !st.finished && st.stage == "training"; });
  EXPECT_EQ(steps_trained, 0u);
  s.base.steps = 9;
  try {
    nn::sweep(s);
    ADD_FAILURE() << "a store of another configuration should be refused";
  } catch (const sdpa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("another configuration"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// The text task: one sample per policy, written by the final model of the policy's first
// run, which the store keeps as a checkpoint; a resumed sweep (everything loaded) writes
// the same samples, and a prompt outside the corpus's alphabet is refused before training.
TEST(Sweep, TextSweepSamplesEachPolicyFromItsStoredCheckpoint) {
  char tmpl[] = "/tmp/sdpa_sweep_text.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    std::ofstream f(dir + "/corpus.txt", std::ios::binary);
    for (int i = 0; i < 60; ++i) f << "ROMEO: the quick brown fox jumps over the lazy dog.\n";
  }
  nn::SweepSpec s = tiny_sweep();
  s.base.task = "text";
  s.base.corpus = dir + "/corpus.txt";
  s.base.seq = 16;
  s.policies = {"inv_sqrt_dk", "qk_norm"};
  s.sample.tokens = 20;
  s.store = dir + "/runs";
  const nn::SweepResult r = nn::sweep(s);
  ASSERT_EQ(r.samples.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const nn::SweepSample& smp = r.samples[k];
    EXPECT_EQ(smp.policy, s.policies[k]);
    EXPECT_EQ(smp.seed, 1u);
    EXPECT_EQ(smp.text.rfind("ROMEO:", 0), 0u) << smp.text;
    EXPECT_EQ(smp.text.size(), 6u + 20u) << smp.text;  // ASCII corpus: a character is a byte
    const std::string ck = dir + "/runs/w16_dk8_xavier_lr0.003_" + smp.policy + "_s1.ckpt";
    EXPECT_EQ(nn::sample(nn::load_checkpoint(ck), s.sample), smp.text) << "the sample comes from the stored state";
  }
  const nlohmann::ordered_json doc = nn::to_json(r);
  EXPECT_EQ(doc["samples"].size(), 2u);
  EXPECT_EQ(doc["sample"]["prompt"], "ROMEO:");
  const nn::SweepResult resumed = nn::sweep(s);
  EXPECT_TRUE(resumed.runs[0].from_store);
  ASSERT_EQ(resumed.samples.size(), 2u);
  EXPECT_EQ(resumed.samples[1].text, r.samples[1].text);

  s.sample.prompt = "JULIET:";  // 'J', 'L', 'I' are not in this corpus
  try {
    nn::sweep(s);
    ADD_FAILURE() << "a prompt outside the alphabet should be refused";
  } catch (const sdpa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample_prompt: "), std::string::npos) << e.what();
  }
  s.sample.prompt.clear();
  EXPECT_TRUE(nn::sweep(s).samples.empty());
  std::filesystem::remove_all(dir);
}
