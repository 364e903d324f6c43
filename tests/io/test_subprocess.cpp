// test_subprocess.cpp — run_process: arguments reach the child as given (no shell), stdin
// and stdout round-trip, exit codes come back, a missing program is an error.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "io/subprocess.hpp"
#include "test_util.hpp"

namespace sdpa::io {
namespace {

using test::expect_error;
using test::TempDir;

std::string text(const ProcessResult& r) { return std::string(r.out.begin(), r.out.end()); }

// A script in a directory whose name holds a space, both quotes and a '$': a shell
// would split or expand it, an argument vector does not.
std::string awkward_script(const TempDir& dir, const std::string& body) {
  const std::string sub = dir.path + "/it's a \"dir\" $HOME";
  EXPECT_EQ(::mkdir(sub.c_str(), 0755), 0);
  const std::string path = sub + "/print args.sh";
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  return path;
}

TEST(Subprocess, ArgumentsArriveVerbatim) {
  TempDir dir;
  const std::string script = awkward_script(dir, "for a in \"$@\"; do printf '[%s]' \"$a\"; done");
  const auto r = run_process({script, "a b", "it's", "\"q\"", "$HOME", ""});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(text(r), "[a b][it's][\"q\"][$HOME][]");
}

TEST(Subprocess, InputReachesStdinAndOutputComesBack) {
  std::string big(1 << 20, 'x');  // larger than a pipe's buffer, both ways
  big[12345] = 'y';
  const auto r = run_process({"cat"}, big);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(text(r), big);
}

TEST(Subprocess, StdinIsEmptyWithoutInput) {
  const auto r = run_process({"wc", "-c"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(std::stoi(text(r)), 0);
}

TEST(Subprocess, ExitCodeIsReturned) {
  TempDir dir;
  const std::string script = awkward_script(dir, "echo partial; exit 3");
  const auto r = run_process({script});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(text(r), "partial\n");
}

TEST(Subprocess, ChildThatIgnoresItsInputDoesNotKillUs) {
  const auto r = run_process({"true"}, std::string(1 << 22, 'z'));  // SIGPIPE on our side
  EXPECT_EQ(r.exit_code, 0);
}

TEST(Subprocess, MissingProgramIsAnError) {
  expect_error([] { run_process({"/nonexistent/dir/prog", "x"}); }, {"cannot start", "/nonexistent/dir/prog"});
  expect_error([] { run_process({"sdpa-no-such-program-on-path"}); }, {"cannot start", "sdpa-no-such-program-on-path"});
  expect_error([] { run_process({}); }, {"no program"});
}

}  // namespace
}  // namespace sdpa::io
