// atomic_file.cpp — temporary file + fsync + rename.
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "sdpa/error.hpp"

namespace sdpa::io {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// "dir/name" -> ("dir/", "name"); "name" -> ("", "name"); "/name" -> ("/", "name").
std::pair<std::string, std::string> split(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {path.substr(0, slash + 1), path.substr(slash + 1)};
}

// The process umask, read without changing it (umask(2) would, racing other
// threads): Linux reports it in /proc/self/status. 022 if that is unavailable.
mode_t current_umask() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8) & 0777);
  return 022;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability only: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

OutputSet::~OutputSet() {
  if (committed_) return;
  for (const auto& p : pending_) ::unlink(p.temp.c_str());
}

std::string OutputSet::add(const std::string& path, std::vector<unsigned char> bytes) {
  if (committed_) throw Error(path + ": cannot add an output file after commit");
  if (path.empty()) throw Error("output path is empty");
  const auto [dir, name] = split(path);
  if (name.empty() || name == "." || name == "..")
    throw Error(path + ": an output path must name a file, not a directory");
  const std::string dir_shown = dir.empty() ? "." : dir;

  struct stat dst {};
  if (::stat(dir_shown.c_str(), &dst) != 0)
    throw Error(path + ": cannot write into directory '" + dir_shown + "': " + errno_text(errno));
  if (!S_ISDIR(dst.st_mode)) throw Error(path + ": '" + dir_shown + "' is not a directory");
  for (const auto& p : pending_)
    if (p.dir_dev == dst.st_dev && p.dir_ino == dst.st_ino && p.name == name)
      throw Error(path + ": the same output file is named twice" +
                  (p.target == path ? "" : " (as '" + p.target + "')"));
  struct stat tst {};
  if (::stat(path.c_str(), &tst) == 0 && S_ISDIR(tst.st_mode)) throw Error(path + ": is a directory");

  std::string temp = dir + "." + name + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) throw Error(path + ": cannot create a file in '" + dir_shown + "': " + errno_text(errno));

  // Any failure from here on removes the temporary and leaves the set unchanged.
  auto give_up = [&](const std::string& what_failed) {
    const int e = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    throw Error(path + ": " + what_failed + ": " + errno_text(e));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) give_up("write failed");
    if (n == 0) {
      errno = ENOSPC;
      give_up("write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0666 & ~current_umask()) != 0) give_up("cannot set permissions");
  if (::fsync(fd) != 0) give_up("cannot flush to disk");
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    throw Error(path + ": close failed: " + errno_text(e));
  }
  try {
    pending_.push_back({path, temp, dst.st_dev, dst.st_ino, name});
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  return temp;
}

void OutputSet::commit() {
  if (committed_) throw Error("output files: commit() called twice");
  // The one foreseeable rename failure: a directory created at a target since add().
  for (const auto& p : pending_) {
    struct stat st {};
    if (::stat(p.target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error(p.target + ": is a directory");
  }
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (::rename(it->temp.c_str(), it->target.c_str()) != 0) {
      const int e = errno;
      const std::string msg = it->target + ": cannot move into place: " + errno_text(e);
      pending_.erase(pending_.begin(), it);  // those are in place now; the destructor removes the rest
      throw Error(msg);
    }
  }
  committed_ = true;
  std::vector<std::string> dirs;
  for (const auto& p : pending_) {
    const std::string d = split(p.target).first;
    bool seen = false;
    for (const auto& x : dirs) seen = seen || x == d;
    if (!seen) dirs.push_back(d);
  }
  for (const auto& d : dirs) fsync_dir(d);
}

void write_npy_atomic(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data) {
  OutputSet out;
  out.add(path, serialize_npy(dtype, shape, data));
  out.commit();
}

}  // namespace sdpa::io
