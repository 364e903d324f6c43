// data_file.hpp — the files the executable runs or reads at run time (the PyTorch timing
// script, the report scripts), found without the source tree: installed beside the
// executable in <prefix>/share/sdpa/, or in the build tree's share/sdpa/ (CMake copies
// them there at configure time).
#pragma once

#include <string>

namespace sdpa::io {

/// The path of data file `name`, the first of these that exists:
///   1. $SDPA_DATA_DIR/name (when set and not empty);
///   2. executable_dir()/../share/sdpa/name (an install: <prefix>/bin/sdpa);
///   3. the build tree's share/sdpa/name (compiled in as SDPA_BUILD_DATA_DIR).
/// Throws sdpa::Error listing every path tried when none exists.
std::string data_file(const std::string& name);

}  // namespace sdpa::io
