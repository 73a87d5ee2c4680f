// ChildProcess: posix_spawn with pipes, polled reads, a waitpid loop with a deadline.
#include "io/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/error.hpp"

extern char** environ;

namespace moerun::io {
namespace {

constexpr std::size_t kMaxErr = 1u << 20;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string last_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  const auto nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, bool pipe_stdin, bool pipe_stdout) {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  auto cleanup = [&] {
    for (int* p : {in, out, err})
      for (int k = 0; k < 2; ++k) close_fd(p[k]);
  };
  if ((pipe_stdin && ::pipe2(in, O_CLOEXEC) != 0) || (pipe_stdout && ::pipe2(out, O_CLOEXEC) != 0) || ::pipe2(err, O_CLOEXEC) != 0) {
    cleanup();
    fail(ErrorKind::Io, argv[0], ": cannot create pipes: ", std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (pipe_stdin)
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (pipe_stdout)
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  else
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  // spawnp: a bare program name (python3) is looked up in PATH.
  const int rc = ::posix_spawnp(&pid_, args[0].c_str(), &fa, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    cleanup();
    fail(ErrorKind::Io, argv[0], ": cannot start: ", std::strerror(rc));
  }
  close_fd(in[0]);
  close_fd(out[1]);
  close_fd(err[1]);
  in_ = in[1];
  out_ = out[0];
  err_ = err[0];
  if (!pipe_stdout) out_eof_ = true;
  // A helper that died must not kill us with SIGPIPE on the next write.
  ::signal(SIGPIPE, SIG_IGN);
}

ChildProcess::~ChildProcess() {
  close_fd(in_);
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
  close_fd(out_);
  close_fd(err_);
}

void ChildProcess::drain(int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  if (!out_eof_) fds[n++] = {out_, POLLIN, 0};
  if (!err_eof_) fds[n++] = {err_, POLLIN, 0};
  if (n == 0) return;
  if (::poll(fds, static_cast<nfds_t>(n), timeout_ms) <= 0) return;
  for (int i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    const ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
    const bool is_out = fds[i].fd == out_;
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      (is_out ? out_eof_ : err_eof_) = true;
    } else if (is_out) {
      out_buf_.append(buf, static_cast<std::size_t>(r));
    } else if (err_buf_.size() < kMaxErr) {
      err_buf_.append(buf, static_cast<std::size_t>(r));
    }
  }
}

void ChildProcess::write_line(const std::string& line) {
  const std::string data = line + "\n";
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    const ssize_t w = ::write(in_, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(ErrorKind::Io, "helper process: write failed (", std::strerror(errno), "): ", last_line(err_buf_));
    p += w;
    left -= static_cast<std::size_t>(w);
    drain(0);  // a helper that writes while reading must not block us both
  }
}

std::string ChildProcess::read_line(double timeout_s, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const auto nl = out_buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return line;
    }
    if (out_eof_) {
      for (int i = 0; i < 50 && !err_eof_; ++i) drain(20);  // its last words
      fail(ErrorKind::Io, what, ": the helper ended without an answer: ", last_line(err_buf_));
    }
    if (std::chrono::steady_clock::now() > deadline) fail(ErrorKind::Io, what, ": no answer from the helper in ", timeout_s, " s");
    drain(50);
  }
}

ChildProcess::Exit ChildProcess::wait(double timeout_s) {
  close_fd(in_);
  Exit e;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!reaped_) {
    drain(20);
    const pid_t w = ::waitpid(pid_, &status_, WNOHANG);
    if (w == pid_) {
      reaped_ = true;
    } else if (w < 0 && errno != EINTR) {
      fail(ErrorKind::Io, "waitpid failed: ", std::strerror(errno));
    } else if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = e.timed_out = true;
    }
  }
  for (int i = 0; i < 100 && !(err_eof_ && out_eof_); ++i) drain(10);
  if (WIFEXITED(status_)) e.code = WEXITSTATUS(status_);
  if (WIFSIGNALED(status_) && !e.timed_out) e.signal = WTERMSIG(status_);
  e.err = err_buf_;
  return e;
}

}  // namespace moerun::io
