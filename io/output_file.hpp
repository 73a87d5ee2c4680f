// Output files: what a command may write to, checked before any work, and how it is written.
// Outputs are replaced atomically (a fresh temp file next to the target, renamed over it), which
// would turn a device, a FIFO or a symlink into a regular file and would silently destroy an
// input given as an output. So an existing target must be a regular file (a symlink is followed:
// the file it points at is replaced, the link stays), and no output may be an input or another
// output, counting the side files an output makes (OUT.journal*, OUT.N per router, OUT.lock).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace moerun::io {

// A path as the command line gave it, with the option that gave it (for messages).
struct PathUse {
  std::string path;
  std::string option;  // "--output"
};

// Before any work: the directory exists and is writable, and a file with the longest side-file
// name can be made there (Io otherwise); an existing target is a regular file after following
// symlinks (Usage otherwise).
void check_output_target(const std::string& path, const std::string& option);
// Usage error naming both options when an output is an input, another output, or would be
// overwritten by another output's side files. Paths are compared as files (device and inode) when
// they exist, else by their absolute, normalised spelling.
void check_distinct_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs);

// A file replaced atomically: written to a new temp file in the target's directory (a fresh name,
// so a stale or planted PATH.tmp is never opened), then synced and renamed over the target, and
// the directory synced. Until commit() the target is untouched; without commit() the temp file is
// removed. A non-regular target is refused (Usage); a symlink's target is replaced.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return tmp_; }  // for writers that open it themselves (HDF5)
  void write(const std::string& data);                   // appends
  void commit();

 private:
  std::string path_, target_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Removes the temp files an AtomicFile for `path` leaves when its process is killed
// (PATH.tmp.XXXXXX); returns how many. Call before writing `path` again.
int remove_stale_temp_files(const std::string& path);

// `write` fills the temp file (its path given); then it is committed.
void replace_file_atomically(const std::string& path, const std::function<void(const std::string& tmp)>& write);
// Text lines (each followed by '\n'), replaced atomically.
void write_file_atomically(const std::string& path, const std::vector<std::string>& lines);

// For writers of side files: write(2) until done (EINTR retried; Io naming `path` on failure), and
// the directory a path is in ("." for a bare name).
void write_fully(int fd, const std::string& data, const std::string& path);
std::string parent_dir(const std::string& path);

}  // namespace moerun::io
