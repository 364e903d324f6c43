// atomic_file.hpp — write a set of output files all-or-nothing.
#pragma once

#include <string>
#include <vector>

#include "io/npy.hpp"

namespace sdpa::io {

/// Each add() writes its bytes to a temporary file beside the target (same
/// directory, so the same filesystem) and fsyncs it; commit() renames them all into
/// place. Until commit() nothing at any destination is touched, and if commit() is
/// never reached — an exception, an early return — the destructor deletes every
/// temporary file: a failed run leaves no partial output.
class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  ~OutputSet();

  /// Throws sdpa::Error naming the path (unwritable directory, disk full, same path twice).
  /// Returns the temporary file's path, readable until commit() or destruction.
  std::string add(const std::string& path, const std::vector<unsigned char>& bytes);
  /// Renames every temporary into place. Throws sdpa::Error on failure.
  void commit();

 private:
  struct Pending {
    std::string target, temp;
  };
  std::vector<Pending> pending_;
  bool committed_ = false;
};

/// One .npy file, written atomically.
void write_npy_atomic(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data);

}  // namespace sdpa::io
