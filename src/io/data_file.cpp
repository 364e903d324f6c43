// data_file.cpp — see data_file.hpp.
#include "io/data_file.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "io/subprocess.hpp"
#include "sdpa/error.hpp"

namespace sdpa::io {

std::string data_file(const std::string& name) {
  const char* env = std::getenv("SDPA_DATA_DIR");
  const bool from_env = env && *env;
  const std::string path =
      std::filesystem::path((from_env ? std::string(env) : executable_dir() + "/../share/sdpa") + "/" + name)
          .lexically_normal()
          .string();
  if (::access(path.c_str(), R_OK) != 0)
    throw Error("cannot read '" + path + "' (" + name + ", looked for " +
                (from_env ? "in $SDPA_DATA_DIR" : "in share/sdpa beside the executable; set SDPA_DATA_DIR") + ")");
  return path;
}

}  // namespace sdpa::io
