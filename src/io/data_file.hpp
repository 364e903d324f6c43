// data_file.hpp — files the tools read at run time (report scripts, the torch timing
// script, docs the report links to), found beside the executable, never in the source tree.
#pragma once

#include <string>

namespace sdpa::io {

/// The path of data file `name`: `$SDPA_DATA_DIR/name` when that variable is set, else
/// `<directory of the executable>/../share/sdpa/name`. The build tree mirrors the install
/// tree (build/bin/sdpa, build/share/sdpa/), so one rule serves both. Throws sdpa::Error
/// naming the path tried when the file is not readable.
std::string data_file(const std::string& name);

}  // namespace sdpa::io
