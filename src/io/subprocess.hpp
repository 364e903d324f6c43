// subprocess.hpp — run another program through an argument vector: no shell, no quoting.
#pragma once

#include <string>
#include <vector>

namespace sdpa::io {

struct ProcessResult {
  int exit_code = -1;              // the child's exit status; 128 + N when killed by signal N
  std::vector<unsigned char> out;  // everything it wrote on stdout
};

/// Runs argv[0] (searched on PATH when it holds no '/') with exactly these arguments:
/// nothing is passed through a shell, so a path holding spaces or quotes is one
/// argument. `input`, if not empty, is written to the child's stdin (which is otherwise
/// /dev/null); its stdout is captured; its stderr goes to ours, so its own message
/// reaches the user. Throws sdpa::Error naming argv[0] when it cannot be started
/// (missing, not executable); a non-zero exit is returned, not thrown.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input = {});

/// The directory of the running executable (from /proc/self/exe), without a trailing '/'.
std::string executable_dir();

}  // namespace sdpa::io
