// mask_rows.hpp — what each row of a call's explicit masks lets through, computed once per
// call before the kernel runs (docs/design.md, "Explicit masks: one table per call").
#pragma once

#include <vector>

#include "attention/problem.hpp"

namespace sdpa::detail {

/// The MaskRow of every distinct row of p's explicit masks (keep and/or additive, (B, Hq, Nq,
/// Nk) with stride 0 on broadcast dimensions): a row broadcast over batch, heads or query
/// rows is computed and stored once. One read of the mask bytes, spread over `workers`
/// threads. attach() points p at the table, which must outlive every use of p. Without an
/// explicit mask it holds nothing and leaves p as it is.
class MaskRowTable {
 public:
  MaskRowTable() = default;
  MaskRowTable(const MaskRowTable&) = delete;
  MaskRowTable& operator=(const MaskRowTable&) = delete;

  /// Rows the table of p holds, and where row (b, h, i) lies: the one layout, used both to
  /// size the table and to fill and read it.
  struct Layout {
    i64 rows = 0;
    i64 stride[3] = {0, 0, 0};  // of b, h, i; 0 along a dimension both masks broadcast
  };
  static Layout layout(const Problem& p);

  void attach(Problem& p, int workers);

 private:
  std::vector<MaskRow> rows_;
};

}  // namespace sdpa::detail
