// atomic_file.cpp — temp file + fsync + rename.
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sdpa/error.hpp"

namespace sdpa::io {
namespace {

std::string errno_text() { return std::strerror(errno); }

// "dir/name" -> ("dir/", "name"); "name" -> ("", "name").
std::pair<std::string, std::string> split(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {path.substr(0, slash + 1), path.substr(slash + 1)};
}

}  // namespace

OutputSet::~OutputSet() {
  if (committed_) return;
  for (const auto& p : pending_) ::unlink(p.temp.c_str());
}

std::string OutputSet::add(const std::string& path, const std::vector<unsigned char>& bytes) {
  if (path.empty()) throw Error("output path is empty");
  for (const auto& p : pending_)
    if (p.target == path) throw Error(path + ": the same output file is named twice");
  const auto [dir, name] = split(path);
  if (name.empty()) throw Error(path + ": an output path must name a file, not a directory");
  std::string temp = dir + "." + name + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) throw Error(path + ": cannot create a file in '" + (dir.empty() ? "." : dir) + "': " + errno_text());
  pending_.push_back({path, temp});  // from here on the destructor removes it
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      throw Error(path + ": write failed: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error(path + ": cannot finish writing: " + why);
  }
  if (::close(fd) != 0) throw Error(path + ": close failed: " + errno_text());
  return temp;
}

void OutputSet::commit() {
  for (const auto& p : pending_)
    if (::rename(p.temp.c_str(), p.target.c_str()) != 0) throw Error(p.target + ": cannot move into place: " + errno_text());
  committed_ = true;
}

void write_npy_atomic(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data) {
  OutputSet out;
  out.add(path, serialize_npy(dtype, shape, data));
  out.commit();
}

}  // namespace sdpa::io
