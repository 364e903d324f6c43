// atomic_file.hpp — write a set of output files all-or-nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/npy.hpp"

namespace sdpa::io {

/// Each add() writes its bytes at once to a temporary file beside the target
/// (".<name>.tmp.XXXXXX" in the same directory, so on the same filesystem) and
/// fsyncs it; commit() renames them all into place and fsyncs the directories.
/// Until commit() nothing at any destination is touched, and if commit() is never
/// reached — an exception, an early return — the destructor deletes every temporary
/// file: a failed run leaves no partial output.
///
/// commit() first checks that no target is a directory, the one rename failure
/// that can be foreseen; a rename failing after others succeeded (the filesystem
/// vanishing mid-way) leaves the files already renamed in place and removes the rest.
///
/// Files get mode 0666 minus the process umask, like a file opened with O_CREAT. A
/// target that is a symbolic link is replaced by the file, not written through.
class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  ~OutputSet();

  /// Writes the temporary file now. Throws sdpa::Error naming `path` when its
  /// directory is missing or not writable, the disk is full, the path names a
  /// directory, or the same file was already added (also as "./x" vs "x"); after a
  /// throw the set is as it was before the call. Returns the temporary file's path,
  /// which holds `bytes` until commit() or destruction.
  std::string add(const std::string& path, std::vector<unsigned char> bytes);

  /// Renames every temporary into place. Throws sdpa::Error naming the target on
  /// failure. Adding after a commit is an error.
  void commit();

 private:
  struct Pending {
    std::string target, temp;
    dev_t dir_dev;
    ino_t dir_ino;
    std::string name;  // last component of target
  };
  std::vector<Pending> pending_;
  bool committed_ = false;
};

/// One .npy file, written atomically (an OutputSet of one).
void write_npy_atomic(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data);

}  // namespace sdpa::io
