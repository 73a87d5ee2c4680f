// HDF5 probe: posix_spawn of the walker, a pipe for its one-line verdict, a polling wait with a
// deadline (SIGKILL on expiry).
#include "io/hdf5_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "base/error.hpp"
#include "io/hdf5.hpp"

extern char** environ;

namespace moerun::io {
namespace {

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

std::string first_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  const auto nl = s.rfind('\n');  // the last line: sanitizer reports end with their summary
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

}  // namespace

Hdf5Probe default_hdf5_probe() {
  Hdf5Probe p;
  const char* off = std::getenv("MOERUN_HDF5_PROBE");
  if (off && std::string(off) == "0") return p;
  std::error_code ec;
  p.program = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) p.program.clear();
  if (const char* t = std::getenv("MOERUN_HDF5_PROBE_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end == t || *end || !(v > 0)) fail(ErrorKind::Usage, "MOERUN_HDF5_PROBE_TIMEOUT must be a number of seconds > 0, not \"", t, "\"");
    p.timeout_s = v;
  }
  return p;
}

void Hdf5Probe::check(const std::vector<std::string>& files) const {
  if (program.empty()) return;
  std::vector<std::string> present;
  std::error_code ec;
  for (const auto& f : files)
    if (std::filesystem::is_regular_file(f, ec)) present.push_back(f);
  if (present.empty()) return;

  std::vector<std::string> args{program, "__probe-hdf5"};
  args.insert(args.end(), present.begin(), present.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  Pipe err;
  if (::pipe2(err.fd, O_CLOEXEC) != 0) fail(ErrorKind::Io, "HDF5 probe: pipe failed: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err.fd[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) fail(ErrorKind::Io, "HDF5 probe: cannot start ", program, ": ", std::strerror(rc));
  ::close(err.fd[1]);
  err.fd[1] = -1;

  // Drain the child's stderr while waiting (a chatty child must not block on a full pipe).
  std::string out;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool exited = false, timed_out = false;
  while (!exited) {
    pollfd p{err.fd[0], POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) {
      char buf[4096];
      const ssize_t n = ::read(err.fd[0], buf, sizeof buf);
      if (n > 0 && out.size() < (1u << 20)) out.append(buf, static_cast<std::size_t>(n));
    }
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) exited = true;
    else if (w < 0 && errno != EINTR) fail(ErrorKind::Io, "HDF5 probe: waitpid failed: ", std::strerror(errno));
    if (!exited && std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      exited = timed_out = true;
    }
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(err.fd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));

  // The child names the file it was on in its first line of output ("probing FILE").
  std::string current = present.front();
  const std::string marker = "moerun-probe: ";
  for (std::size_t pos = 0; (pos = out.find(marker, pos)) != std::string::npos;) {
    const auto end = out.find('\n', pos);
    current = out.substr(pos + marker.size(), end == std::string::npos ? std::string::npos : end - pos - marker.size());
    pos = end == std::string::npos ? out.size() : end;
  }
  if (timed_out)
    fail(ErrorKind::BadInput, current, ": reading its HDF5 metadata did not finish in ", timeout_s,
         " s (corrupt metadata makes libhdf5 loop; MOERUN_HDF5_PROBE_TIMEOUT raises the limit)");
  if (WIFSIGNALED(status))
    fail(ErrorKind::BadInput, current, ": corrupt HDF5 metadata (reading it crashed libhdf5 with signal ", WTERMSIG(status), ", ",
         ::strsignal(WTERMSIG(status)), ")");
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 3 || code == 4) {  // the walker's own verdict: bad input, or an unreadable file
    const std::string line = first_line(out);
    const std::string prefix = "moerun: error: ";
    fail(static_cast<ErrorKind>(code), line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : line);
  }
  // Anything else is a crash the child's runtime caught (a sanitizer's report ends with exit 1).
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(ErrorKind::BadInput, current, ": corrupt HDF5 metadata (reading it crashed libhdf5: the probe exited with ",
         WEXITSTATUS(status), ": ", first_line(out), ")");
}

int hdf5_probe_main(int argc, char** argv) {
  h5_quiet();
  for (int i = 1; i < argc; ++i) {
    // Before the walk: if libhdf5 dies, the parent knows which file it was on.
    std::cerr << "moerun-probe: " << argv[i] << std::endl;
    try {
      h5_walk_metadata(argv[i]);
    } catch (const Error& e) {
      std::cerr << "moerun: error: " << e.what() << std::endl;
      return e.kind() == ErrorKind::Io ? 4 : 3;
    } catch (const std::exception& e) {
      std::cerr << "moerun: error: " << argv[i] << ": corrupt HDF5 metadata (" << e.what() << ")" << std::endl;
      return 3;
    }
  }
  return 0;
}

}  // namespace moerun::io
