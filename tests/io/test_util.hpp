// test_util.hpp — helpers shared by the io tests.
#pragma once

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "sdpa/error.hpp"

namespace sdpa::io::test {

// Runs f, expects an sdpa::Error whose one-line message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no sdpa::Error thrown";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
    for (const auto& f : fragments) EXPECT_NE(m.find(f), std::string::npos) << "'" << f << "' not in: " << m;
  }
}

// A fresh directory under /tmp, removed (with its files) at the end.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/sdpa_io_test.XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (!p) std::abort();
    path = p;
  }
  ~TempDir() { remove_tree(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Names in the directory, sorted, without "." and "..".
  std::vector<std::string> files() const { return list(path); }

  static std::vector<std::string> list(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static void remove_tree(const std::string& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
      ::chmod(p.c_str(), 0700);
      for (const auto& f : list(p)) remove_tree(p + "/" + f);
      ::rmdir(p.c_str());
    } else {
      ::unlink(p.c_str());
    }
  }
};

}  // namespace sdpa::io::test
