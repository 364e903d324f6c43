// test_data_file.cpp — io::data_file: $SDPA_DATA_DIR first (any characters in its path),
// and an error that names the place tried when the file is not there.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "io/data_file.hpp"
#include "test_util.hpp"

namespace sdpa::io {
namespace {

using test::expect_error;
using test::TempDir;

// Sets an environment variable for one test.
struct EnvVar {
  std::string name;
  EnvVar(const std::string& n, const std::string& value) : name(n) { ::setenv(n.c_str(), value.c_str(), 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

TEST(DataFile, TheEnvironmentOverrideComesFirst) {
  TempDir dir;
  const std::string sub = dir.path + "/it's a \"data\" dir";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  std::ofstream(sub + "/torch_sdpa.py") << "# a stand-in\n";
  const EnvVar env("SDPA_DATA_DIR", sub);
  EXPECT_EQ(data_file("torch_sdpa.py"), sub + "/torch_sdpa.py");
}

TEST(DataFile, MissingNamesWhatWasTried) {
  TempDir dir;
  {
    const EnvVar env("SDPA_DATA_DIR", dir.path);
    expect_error([] { data_file("no_such_file.py"); }, {dir.path + "/no_such_file.py", "SDPA_DATA_DIR"});
  }
  // Without the override: share/sdpa beside this test executable (which has none).
  expect_error([] { data_file("no_such_file.py"); }, {"/share/sdpa/no_such_file.py", "beside the executable"});
}

}  // namespace
}  // namespace sdpa::io
