// data_file.cpp — see data_file.hpp.
#include "io/data_file.hpp"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "io/subprocess.hpp"
#include "sdpa/error.hpp"

#ifndef SDPA_BUILD_DATA_DIR
#error "SDPA_BUILD_DATA_DIR must name the build tree's share/sdpa directory (src/CMakeLists.txt)"
#endif

namespace sdpa::io {

std::string data_file(const std::string& name) {
  std::vector<std::string> tried;
  if (const char* dir = std::getenv("SDPA_DATA_DIR"); dir && *dir) tried.push_back(std::string(dir) + "/" + name);
  try {
    tried.push_back(executable_dir() + "/../share/sdpa/" + name);
  } catch (const Error&) {
    // no /proc/self/exe (a restricted sandbox): the other places still count
  }
  tried.push_back(std::string(SDPA_BUILD_DATA_DIR) + "/" + name);
  for (const auto& path : tried) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return std::filesystem::path(path).lexically_normal().string();
  }
  std::string list;
  for (const auto& path : tried) list += (list.empty() ? "" : ", ") + path;
  throw Error("cannot find the data file '" + name + "' (tried " + list + "; SDPA_DATA_DIR names another directory)");
}

}  // namespace sdpa::io
