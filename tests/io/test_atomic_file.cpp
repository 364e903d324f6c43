// test_atomic_file.cpp — OutputSet: all files or none, temporaries cleaned up,
// errors that name the path.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/npy.hpp"
#include "sdpa/error.hpp"
#include "test_util.hpp"

namespace sdpa::io {
namespace {

using test::expect_error;
using test::TempDir;
using Bytes = std::vector<unsigned char>;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST(OutputSet, CommitWritesEveryFile) {
  TempDir dir;
  const float x[3] = {1, 2, 3};
  {
    OutputSet out;
    const std::string ta = out.add(dir.path + "/a.npy", serialize_npy(DType::f32, {3}, x));
    out.add(dir.path + "/b.npy", serialize_npy(DType::f32, {1, 3}, x));
    out.add(dir.path + "/c.txt", bytes_of("hello"));
    // Only temporaries so far, named after their targets, in the same directory.
    const auto before = dir.files();
    ASSERT_EQ(before.size(), 3u);
    for (const auto& f : before) EXPECT_NE(f.find(".tmp."), std::string::npos) << f;
    EXPECT_EQ(before[0].rfind(".a.npy.tmp.", 0), 0u) << before[0];
    EXPECT_EQ(ta.rfind(dir.path + "/.a.npy.tmp.", 0), 0u) << ta;
    EXPECT_EQ(read_npy(ta).shape, (std::vector<std::int64_t>{3}));  // readable before commit
    out.commit();
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"a.npy", "b.npy", "c.txt"}));
  const NpyArray a = read_npy(dir.path + "/a.npy");
  EXPECT_EQ(std::memcmp(a.f32(), x, sizeof x), 0);
  EXPECT_EQ(read_npy(dir.path + "/b.npy").shape, (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(slurp(dir.path + "/c.txt"), "hello");
}

TEST(OutputSet, AnExceptionBeforeCommitLeavesNothing) {
  TempDir dir;
  try {
    OutputSet out;
    out.add(dir.path + "/a.npy", bytes_of("one"));
    out.add(dir.path + "/b.npy", bytes_of("two"));
    throw std::runtime_error("a later step failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(dir.files().empty());
  {
    OutputSet out;  // an early return: no commit, no exception
    out.add(dir.path + "/a.npy", bytes_of("one"));
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(OutputSet, ExistingFilesAreUntouchedUntilCommit) {
  TempDir dir;
  const std::string target = dir.path + "/keep.npy";
  put(target, "old");
  {
    OutputSet out;
    out.add(target, bytes_of("new"));
    EXPECT_EQ(slurp(target), "old");
  }
  EXPECT_EQ(slurp(target), "old");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"keep.npy"});
  OutputSet out;
  out.add(target, bytes_of("new"));
  out.commit();
  EXPECT_EQ(slurp(target), "new");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"keep.npy"});
}

TEST(OutputSet, UnwritableDirectoryNamesThePath) {
  {
    OutputSet out;
    expect_error([&] { out.add("/nonexistent_dir_for_sdpa/x.npy", bytes_of("1")); },
                 {"/nonexistent_dir_for_sdpa/x.npy: ", "/nonexistent_dir_for_sdpa/", "No such file"});
  }
  TempDir dir;
  put(dir.path + "/plain", "a file, not a directory");
  {
    OutputSet out;
    expect_error([&] { out.add(dir.path + "/plain/x.npy", bytes_of("1")); },
                 {dir.path + "/plain/x.npy: ", "Not a directory"});
  }
  if (::geteuid() != 0) {  // root writes anywhere; the mode test only means something otherwise
    const std::string ro = dir.path + "/readonly";
    ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
    OutputSet out;
    expect_error([&] { out.add(ro + "/x.npy", bytes_of("1")); }, {ro + "/x.npy: cannot create", "Permission denied"});
    EXPECT_TRUE(TempDir::list(ro).empty());
  }
  {  // /proc refuses new files even to root
    OutputSet out;
    expect_error([&] { out.add("/proc/sdpa_test_x.npy", bytes_of("1")); }, {"/proc/sdpa_test_x.npy: "});
  }
}

TEST(OutputSet, AFailedWriteNamesThePathAndLeavesNoTemporary) {
  // A file size limit stands in for a full disk: write() fails part-way (EFBIG).
  TempDir dir;
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  {
    OutputSet out;
    expect_error([&] { out.add(dir.path + "/big.npy", Bytes(100000, 7)); },
                 {dir.path + "/big.npy: write failed", "File too large"});
    EXPECT_TRUE(dir.files().empty());
    out.add(dir.path + "/small.npy", Bytes(10, 7));  // still usable
    out.commit();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"small.npy"});
}

TEST(OutputSet, AFailedAddLeavesTheSetUsable) {
  TempDir dir;
  OutputSet out;
  out.add(dir.path + "/a.npy", bytes_of("a"));
  EXPECT_THROW(out.add(dir.path + "/missing/b.npy", bytes_of("b")), Error);
  out.add(dir.path + "/c.npy", bytes_of("c"));
  out.commit();
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"a.npy", "c.npy"}));
}

TEST(OutputSet, RefusesTheSameFileTwiceAndDirectories) {
  TempDir dir;
  OutputSet out;
  out.add(dir.path + "/a.npy", bytes_of("1"));
  expect_error([&] { out.add(dir.path + "/a.npy", bytes_of("2")); }, {dir.path + "/a.npy: ", "named twice"});
  expect_error([&] { out.add(dir.path + "/./a.npy", bytes_of("2")); }, {"named twice", "as '" + dir.path + "/a.npy'"});
  expect_error([&] { out.add(dir.path + "//a.npy", bytes_of("2")); }, {"named twice"});
  expect_error([&] { out.add(dir.path + "/", bytes_of("2")); }, {"must name a file"});
  expect_error([&] { out.add(dir.path + "/..", bytes_of("2")); }, {"must name a file"});
  expect_error([&] { out.add("", bytes_of("2")); }, {"empty"});
  ASSERT_EQ(::mkdir((dir.path + "/sub").c_str(), 0755), 0);
  expect_error([&] { out.add(dir.path + "/sub", bytes_of("2")); }, {dir.path + "/sub: is a directory"});
  out.commit();
  EXPECT_EQ(slurp(dir.path + "/a.npy"), "1");
  expect_error([&] { out.add(dir.path + "/b.npy", bytes_of("2")); }, {"after commit"});
  expect_error([&] { out.commit(); }, {"twice"});
}

TEST(OutputSet, ADirectoryAppearingAtATargetFailsTheWholeCommit) {
  TempDir dir;
  {
    OutputSet out;
    out.add(dir.path + "/a.npy", bytes_of("a"));
    out.add(dir.path + "/b.npy", bytes_of("b"));
    ASSERT_EQ(::mkdir((dir.path + "/b.npy").c_str(), 0755), 0);
    expect_error([&] { out.commit(); }, {dir.path + "/b.npy: is a directory"});
  }
  EXPECT_EQ(dir.files(), std::vector<std::string>{"b.npy"});  // just the directory: no a.npy, no temporaries
}

TEST(OutputSet, ModeFollowsTheUmask) {
  TempDir dir;
  const mode_t old = ::umask(027);
  {
    OutputSet out;
    out.add(dir.path + "/a.npy", bytes_of("a"));
    out.commit();
  }
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/a.npy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(OutputSet, RelativePathsLandInTheWorkingDirectory) {
  TempDir dir;
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir.path.c_str()), 0);
  {
    OutputSet out;
    out.add("rel.npy", bytes_of("r"));
    expect_error([&] { out.add("./rel.npy", bytes_of("r")); }, {"named twice"});
    out.commit();
  }
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"rel.npy"});
}

TEST(WriteNpyAtomic, WritesOneFile) {
  TempDir dir;
  const double x[4] = {1, -2, 3.5, 1e300};
  write_npy_atomic(dir.path + "/x.npy", DType::f64, {2, 2}, x);
  const NpyArray a = read_npy(dir.path + "/x.npy");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(std::memcmp(a.f64(), x, sizeof x), 0);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"x.npy"});
  expect_error([&] { write_npy_atomic(dir.path + "/y.npy", DType::f64, {-1}, x); }, {"negative dimension"});
  expect_error([&] { write_npy_atomic(dir.path + "/no/y.npy", DType::f64, {1}, x); }, {dir.path + "/no/y.npy: "});
  EXPECT_EQ(dir.files(), std::vector<std::string>{"x.npy"});
}

}  // namespace
}  // namespace sdpa::io
