// Guarding a command against libhdf5 itself. Corrupt metadata can crash or hang the library
// (1.10.8 has heap overflows on malformed object headers, found by our fuzz test through
// H5Aexists), where no error return helps and range checks come too late. So before a command opens
// the local HDF5 files it was given, a child process walks their whole metadata
// (h5_walk_metadata); a crash or a hang there becomes a one-line BadInput error naming the file,
// and the command never opens it. Object-store files (s3:// URLs) are probed too, the child
// reading them through the same client (io/hdf5_object_store.hpp): libhdf5 parses their metadata
// the same way, and a crash there is the same crash. It costs one more read of their metadata.
#pragma once
#include <string>
#include <vector>

#include "io/object_store.hpp"

namespace moerun::io {

struct Hdf5Probe {
  std::string program;  // executable that takes `__probe-hdf5 FILE...`; empty: probing is off
  double timeout_s = 60;  // a walk that takes longer counts as a hang (a local walk takes well under 1 s)
  // For s3:// files: the client's retries and timeout, passed to the child (which takes the
  // endpoint and credentials from the same AWS_* variables as the command).
  int s3_retries = 5;
  double s3_timeout_s = 60;

  // BadInput naming the first file whose walk failed, crashed (naming the signal) or timed out;
  // Io when the probe cannot be started. Missing files are left to the readers to report.
  void check(const std::vector<std::string>& files) const;
};

// This executable as the probe (/proc/self/exe); launch/ decides whether to probe at all
// (MOERUN_HDF5_PROBE) and the timeout (MOERUN_HDF5_PROBE_TIMEOUT).
Hdf5Probe hdf5_probe_of_this_executable(double timeout_s = 60);

// The child's side (`moerun __probe-hdf5 [--timeout S] [--s3-retries N --s3-timeout S] FILE...`):
// walks each file (s3:// URLs through a client made from `s3`, its retries and timeout from the
// options); prints one error line and returns 3 (4 for an unreadable file) at the first bad one,
// 0 when all are fine.
int hdf5_probe_main(int argc, char** argv, const S3Config& s3);

}  // namespace moerun::io
