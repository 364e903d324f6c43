// subprocess.cpp — see subprocess.hpp.
#include "io/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "sdpa/error.hpp"

extern char** environ;

namespace sdpa::io {
namespace {

struct Fd {  // closes on scope exit
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Pipe {
  Fd read, write;
  Pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    read.fd = p[0];
    write.fd = p[1];
  }
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input) {
  if (argv.empty() || argv[0].empty()) throw Error("run_process: no program given");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  Pipe out, in;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (input.empty())
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  else
    posix_spawn_file_actions_adddup2(&actions, in.read.fd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.write.fd, STDOUT_FILENO);
  pid_t pid = -1;
  const int rc = argv[0].find('/') == std::string::npos
                     ? ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ)
                     : ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start '" + argv[0] + "': " + std::strerror(rc));
  out.write.reset();
  in.read.reset();
  // Our end of the child's stdin does not block: poll() says some room, not room for all.
  ::fcntl(in.write.fd, F_SETFL, ::fcntl(in.write.fd, F_GETFL) | O_NONBLOCK);

  // Feed stdin and drain stdout together, so that neither side blocks on a full pipe. A
  // child that exits without reading all its input must not kill us with SIGPIPE: the
  // signal is blocked on this thread for the loop, and one it raised is taken after.
  sigset_t pipe_only, old_mask;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  struct RestoreMask {
    const sigset_t& pipe_only;
    const sigset_t& old_mask;
    ~RestoreMask() {
      const timespec zero{0, 0};
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) && !sigismember(&old_mask, SIGPIPE)) sigtimedwait(&pipe_only, nullptr, &zero);
      pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    }
  } restore{pipe_only, old_mask};
  ProcessResult result;
  std::size_t fed = 0;
  if (input.empty()) in.write.reset();
  unsigned char buf[65536];
  while (out.read.fd >= 0) {
    pollfd fds[2] = {{out.read.fd, POLLIN, 0}, {in.write.fd, POLLOUT, 0}};
    const nfds_t n = in.write.fd >= 0 ? 2 : 1;
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 2 && fds[1].revents) {
      const ssize_t w = fds[1].revents & POLLOUT ? ::write(in.write.fd, input.data() + fed, input.size() - fed) : -1;
      if (w > 0) fed += static_cast<std::size_t>(w);
      if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (w <= 0 || fed == input.size()) in.write.reset();  // done, or the child closed its stdin
    }
    if (fds[0].revents) {
      const ssize_t r = ::read(out.read.fd, buf, sizeof buf);
      if (r > 0)
        result.out.insert(result.out.end(), buf, buf + r);
      else if (r == 0 || errno != EINTR)
        out.read.reset();
    }
  }
  in.write.reset();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("waiting for '" + argv[0] + "' failed: " + std::strerror(errno));
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  // POSIX lets posix_spawn report a failed exec as the child's exit status 127 instead of its
  // return value; glibc does so where it cannot share the child's memory (under user-mode
  // QEMU, which turns vfork into fork). A child that exits 127 having written nothing never
  // started.
  if (result.exit_code == 127 && result.out.empty())
    throw Error("cannot start '" + argv[0] + "': exit status 127 (not found, or not executable)");
  return result;
}

std::string executable_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the running executable: " + ec.message());
  return exe.parent_path().string();
}

}  // namespace sdpa::io
