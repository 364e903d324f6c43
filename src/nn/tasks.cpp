// nn/tasks.cpp — generating the synthetic tasks (see tasks.hpp).
#include "nn/tasks.hpp"

#include <algorithm>

namespace sdpa::nn {

std::string Task::name() const {
  switch (kind) {
    case TaskKind::mqar: return "mqar";
    case TaskKind::copy: return "copy";
    case TaskKind::reverse: return "reverse";
    case TaskKind::sort: return "sort";
    case TaskKind::lengthgen: return "lengthgen";
    case TaskKind::text: return "text";
  }
  return "?";
}

Task parse_task(const std::string& name, i64 seq, const std::string& corpus) {
  Task t;
  t.seq = seq;
  if (name == "text") {
    if (seq < 1) throw Error("seq: the text task needs seq >= 1, got " + std::to_string(seq));
    t.kind = TaskKind::text;
    t.corpus = load_corpus(corpus, seq);
    return t;
  }
  if (name == "mqar")
    t.kind = TaskKind::mqar;
  else if (name == "copy")
    t.kind = TaskKind::copy;
  else if (name == "reverse")
    t.kind = TaskKind::reverse;
  else if (name == "sort")
    t.kind = TaskKind::sort;
  else if (name == "lengthgen")
    t.kind = TaskKind::lengthgen;
  else
    throw Error("task: unknown task '" + name + "' (one of mqar, copy, reverse, sort, lengthgen, text)");
  const bool recall = t.kind == TaskKind::mqar;
  if (recall && (seq < 8 || seq > 128))
    throw Error("seq: " + name + " needs 8 <= seq <= 128 (at most 32 distinct keys), got " + std::to_string(seq));
  if (!recall && (seq < 4 || seq % 2 != 0))
    throw Error("seq: " + name + " needs an even seq >= 4, got " + std::to_string(seq));
  return t;
}

namespace {

// Keys 1..32, values 33..64.
void make_mqar(Rng& rng, int* tok, int* tgt, i64 T) {
  const i64 P = std::min<i64>(T / 4, 32), Q = T - 2 * P;
  int keys[32];
  for (int i = 0; i < 32; ++i) keys[i] = i + 1;
  for (i64 i = 0; i < P; ++i) std::swap(keys[i], keys[i + rng.below(32 - i)]);  // P distinct keys
  int vals[32];
  for (i64 i = 0; i < P; ++i) {
    vals[i] = 33 + static_cast<int>(rng.below(32));
    tok[2 * i] = keys[i];
    tok[2 * i + 1] = vals[i];
    tgt[2 * i] = tgt[2 * i + 1] = -1;
  }
  for (i64 j = 0; j < Q; ++j) {
    const i64 w = rng.below(P);
    tok[2 * P + j] = keys[w];
    tgt[2 * P + j] = vals[w];
  }
}

void make_seq2seq(TaskKind kind, Rng& rng, int* tok, int* tgt, i64 T) {
  const i64 L = T / 2;
  std::vector<int> x(static_cast<std::size_t>(L)), y;
  for (auto& v : x) v = 1 + static_cast<int>(rng.below(64));
  y = x;
  if (kind == TaskKind::reverse) std::reverse(y.begin(), y.end());
  if (kind == TaskKind::sort) std::sort(y.begin(), y.end());
  for (i64 i = 0; i < L; ++i) {
    tok[i] = x[static_cast<std::size_t>(i)];
    tgt[i] = -1;
  }
  tok[L] = kSep;
  for (i64 i = 0; i < L; ++i) {
    if (L + 1 + i < T) tok[L + 1 + i] = y[static_cast<std::size_t>(i)];
    tgt[L + i] = y[static_cast<std::size_t>(i)];
  }
}

}  // namespace

namespace {

// The context at `at`: T characters, each position's target the next character.
void text_context(const TextCorpus& c, i64 at, i64 T, int* tok, int* tgt) {
  for (i64 i = 0; i < T; ++i) {
    tok[i] = c.tokens[static_cast<std::size_t>(at + i)];
    tgt[i] = c.tokens[static_cast<std::size_t>(at + i + 1)];
  }
}

}  // namespace

Batch Task::held_out(const std::string& which, i64 count) const {
  if (kind != TaskKind::text) throw Error("held_out: only the text task has held-out parts");
  const auto [begin, end] = corpus->part(which);
  Batch b;
  b.B = count;
  b.T = seq;
  b.tokens.resize(static_cast<std::size_t>(count * seq));
  b.targets.resize(static_cast<std::size_t>(count * seq));
  // starts from begin to the last one whose seq + 1 characters stay inside the part
  const i64 span = end - begin - (seq + 1);
  for (i64 i = 0; i < count; ++i) {
    const i64 at = begin + (count > 1 ? span * i / (count - 1) : 0);
    text_context(*corpus, at, seq, b.tokens.data() + i * seq, b.targets.data() + i * seq);
  }
  return b;
}

Batch Task::make(Rng& rng, i64 B, i64 T, bool random_offset) const {
  Batch b;
  b.B = B;
  b.T = T;
  b.tokens.assign(static_cast<std::size_t>(B * T), 0);
  b.targets.assign(static_cast<std::size_t>(B * T), -1);
  if (kind == TaskKind::text) {
    const auto [begin, end] = corpus->part("train");
    for (i64 i = 0; i < B; ++i)
      text_context(*corpus, begin + rng.below(end - begin - T), T, b.tokens.data() + i * T, b.targets.data() + i * T);
    return b;
  }
  if (kind == TaskKind::lengthgen) b.pos0.assign(static_cast<std::size_t>(B), 0);
  for (i64 i = 0; i < B; ++i) {
    int* tok = b.tokens.data() + i * T;
    int* tgt = b.targets.data() + i * T;
    if (kind == TaskKind::mqar)
      make_mqar(rng, tok, tgt, T);
    else
      make_seq2seq(kind == TaskKind::lengthgen ? TaskKind::sort : kind, rng, tok, tgt, T);
    if (kind == TaskKind::lengthgen && random_offset)
      b.pos0[static_cast<std::size_t>(i)] = static_cast<int>(rng.below(max_positions() - T + 1));
  }
  return b;
}

}  // namespace sdpa::nn
