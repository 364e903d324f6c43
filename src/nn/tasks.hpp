// nn/tasks.hpp — synthetic tasks generated in-process from a seed.
//
// Every task uses one vocabulary of V = 66 tokens: 0 padding, 1..64 symbols, 65 SEP.
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
#pragma once

#include <string>
#include <vector>

#include "nn/common.hpp"

namespace sdpa::nn {

inline constexpr int kVocab = 66;
inline constexpr int kSep = 65;

enum class TaskKind { mqar, copy, reverse, sort, lengthgen };

struct Batch {
  i64 B = 0, T = 0;
  std::vector<int> tokens, targets;  // (B, T)
  std::vector<int> pos0;             // (B) position offset (lengthgen), else empty
};

struct Task {
  TaskKind kind = TaskKind::mqar;
  i64 seq = 32;  // training length T
  std::string name() const;
  /// Positions the model needs: seq, or 2·seq for lengthgen.
  i64 max_positions() const { return kind == TaskKind::lengthgen ? 2 * seq : seq; }
  /// A batch of B sequences of length T (T = seq for training; lengthgen also at 2·seq).
  /// random_offset: lengthgen's training-time position shift.
  Batch make(Rng& rng, i64 B, i64 T, bool random_offset) const;
};

/// Parses a task name and checks the length it needs; throws sdpa::Error.
Task parse_task(const std::string& name, i64 seq);

}  // namespace sdpa::nn
