// nn/tasks.hpp — the training tasks: synthetic ones generated in-process from a seed, and
// character-level text (nn/text.hpp).
//
// Every synthetic task uses one vocabulary of V = 66 tokens: 0 padding, 1..64 symbols, 65 SEP.
// A batch is (tokens, targets), both (B, T); target −1 means "no loss here".
//
//   mqar       multi-query associative recall (Arora et al. 2023, "Zoology"):
//              k1 v1 k2 v2 … kP vP  q1 q2 … qQ  with P = T/4 distinct keys (1..32),
//              values 33..64, Q = T − 2P queries drawn from the keys; the target at
//              a query is its key's value.
//   copy       x1 … xL SEP x1 … x(L−1) → predict x1 … xL after SEP (L = T/2)
//   reverse    the same, reversed      sort   the same, sorted ascending
//   lengthgen  sort trained at T with the positions shifted by a random offset in [0, T],
//              so all 2T learned positions are trained; evaluated at T and at 2T (lists
//              twice as long as any seen in training)
//   text       next-character prediction on a UTF-8 corpus (V = its alphabet): contexts of T
//              characters at uniformly random places of the training part, every position
//              a target; held out: evenly spaced contexts of the validation or test part
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/common.hpp"
#include "nn/text.hpp"

namespace sdpa::nn {

inline constexpr int kVocab = 66;
inline constexpr int kSep = 65;

enum class TaskKind { mqar, copy, reverse, sort, lengthgen, text };

struct Batch {
  i64 B = 0, T = 0;
  std::vector<int> tokens, targets;  // (B, T)
  std::vector<int> pos0;             // (B) position offset (lengthgen), else empty
};

struct Task {
  TaskKind kind = TaskKind::mqar;
  i64 seq = 32;                              // training length T
  std::shared_ptr<const TextCorpus> corpus;  // text only
  std::string name() const;
  /// Vocabulary size: the corpus's alphabet for text, else kVocab.
  i64 vocab() const { return corpus ? corpus->vocab() : kVocab; }
  /// Positions the model needs: seq, or 2·seq for lengthgen.
  i64 max_positions() const { return kind == TaskKind::lengthgen ? 2 * seq : seq; }
  /// A batch of B sequences of length T (T = seq for training; lengthgen also at 2·seq).
  /// random_offset: lengthgen's training-time position shift.
  Batch make(Rng& rng, i64 B, i64 T, bool random_offset) const;
  /// Text only: `count` contexts of length seq evenly spaced over the corpus's part `which`
  /// ("validation" or "test"), the same for every run on this corpus.
  Batch held_out(const std::string& which, i64 count) const;
};

/// Parses a task name and checks the length it needs; text also reads `corpus`
/// (empty: the default corpus, nn/text.hpp). Throws sdpa::Error.
Task parse_task(const std::string& name, i64 seq, const std::string& corpus = "");

}  // namespace sdpa::nn
