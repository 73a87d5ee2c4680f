// HDF5 probe: the walker as a child process, its one-line verdict read from its stderr, a wait
// with a deadline (SIGKILL on expiry).
#include "io/hdf5_probe.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "base/error.hpp"
#include "io/child_process.hpp"
#include "io/hdf5_object_store.hpp"
#include "io/hdf5.hpp"

namespace moerun::io {
namespace {

std::string last_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  const auto nl = s.rfind('\n');  // the last line: sanitizer reports end with their summary
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

}  // namespace

Hdf5Probe hdf5_probe_of_this_executable(double timeout_s) {
  Hdf5Probe p;
  std::error_code ec;
  p.program = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) p.program.clear();
  p.timeout_s = timeout_s;
  return p;
}

void Hdf5Probe::check(const std::vector<std::string>& files) const {
  if (program.empty()) return;
  std::vector<std::string> args{program,        "__probe-hdf5",
                                "--timeout",    std::to_string(timeout_s),
                                "--s3-retries", std::to_string(s3_retries),
                                "--s3-timeout", std::to_string(s3_timeout_s)};
  const std::size_t first_file = args.size();
  std::error_code ec;
  for (const auto& f : files)
    if (is_s3_url(f) || std::filesystem::is_regular_file(f, ec)) args.push_back(f);
  if (args.size() == first_file) return;
  ChildProcess child(args, false, false);
  const ChildProcess::Exit e = child.wait(timeout_s);
  const std::string& out = e.err;

  // The child names the file it is on before walking it ("moerun-probe: FILE").
  std::string current = args[first_file];
  const std::string marker = "moerun-probe: ";
  for (std::size_t pos = 0; (pos = out.find(marker, pos)) != std::string::npos;) {
    const auto end = out.find('\n', pos);
    current = out.substr(pos + marker.size(), end == std::string::npos ? std::string::npos : end - pos - marker.size());
    pos = end == std::string::npos ? out.size() : end;
  }
  if (e.timed_out)
    fail(ErrorKind::BadInput, current, ": reading its HDF5 metadata did not finish in ", timeout_s,
         " s (corrupt metadata makes libhdf5 loop; MOERUN_HDF5_PROBE_TIMEOUT raises the limit)");
  if (e.signal)
    fail(ErrorKind::BadInput, current, ": corrupt HDF5 metadata (reading it crashed libhdf5 with signal ", e.signal, ", ",
         ::strsignal(e.signal), ")");
  if (e.code == 3 || e.code == 4) {  // the walker's own verdict: bad input, or an unreadable file
    const std::string line = last_line(out);
    const std::string prefix = "moerun: error: ";
    fail(static_cast<ErrorKind>(e.code), line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : line);
  }
  // Anything else is a crash the child's runtime caught (a sanitizer's report ends with exit 1).
  if (e.code != 0)
    fail(ErrorKind::BadInput, current, ": corrupt HDF5 metadata (reading it crashed libhdf5: the probe exited with ", e.code, ": ",
         last_line(out), ")");
}

int hdf5_probe_main(int argc, char** argv, const S3Config& s3) {
  // A walk stuck in libhdf5 must not outlive the command that started it (killed, say, by a job
  // scheduler): it dies with its parent, and in any case soon after the parent's own deadline.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 4;  // the parent is already gone
  int first = 1;
  S3Config client = s3;
  while (first + 1 < argc && std::string(argv[first]).rfind("--", 0) == 0) {
    const std::string opt = argv[first], val = argv[first + 1];
    if (opt == "--timeout")
      ::alarm(static_cast<unsigned>(std::max(1.0, std::atof(val.c_str()))) + 10);
    else if (opt == "--s3-retries")
      client.retries = std::atoi(val.c_str());
    else if (opt == "--s3-timeout")
      client.timeout_s = std::max(0.001, std::atof(val.c_str()));
    first += 2;
  }
  h5_quiet();
  std::unique_ptr<ObjectStore> store;
  for (int i = first; i < argc; ++i) {
    // Before the walk: if libhdf5 dies, the parent knows which file it was on.
    std::cerr << "moerun-probe: " << argv[i] << std::endl;
    try {
      if (is_s3_url(argv[i])) {
        if (!store) store = std::make_unique<ObjectStore>(client);
        H5Handle f = h5_open_object_store_file(*store, parse_s3_url(argv[i]));
        h5_walk_metadata(f, argv[i]);
      } else {
        h5_walk_metadata(h5_open_file(argv[i], H5Mode::ReadOnly), argv[i]);
      }
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
