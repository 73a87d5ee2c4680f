// The one rule for every file moerun writes (issue 63). A file is either replaced atomically (a new
// temp file made with O_EXCL | O_NOFOLLOW next to its name, renamed onto the name: a link at the
// name is replaced as a link, never written through) or, for the few written in place (journals,
// locks, the L2 blob), opened by open_owned_file (no link, one hard link, this user's). Named
// outputs are checked before any work: an existing one must be a regular file (a symlink is
// refused), and no output may be an input or another output, counting the side files an output
// makes (OUT.journal*, OUT.N per router, OUT.lock). Nothing else in the tree opens a file for
// writing (tests/io/check_file_writers.py enforces it).
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
// name can be made there (Io otherwise); an existing target is a regular file, not a symlink
// (Usage otherwise).
void check_output_target(const std::string& path, const std::string& option);
// Usage error naming both options when an output is an input, another output, or would be
// overwritten by another output's side files. Paths are compared as files (device and inode) when
// they exist, else by their absolute, normalised spelling.
void check_distinct_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs);

// A file replaced atomically: written to a new temp file in the name's directory (a fresh name,
// so a stale or planted PATH.tmp is never opened), then synced and renamed onto the name, and the
// directory synced. Until commit() the name is untouched; without commit() the temp file is
// removed. A device, FIFO or directory at the name is refused (Usage); a symlink at the name is
// replaced by the new file and what it pointed at is left alone.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return tmp_; }  // for writers that open it themselves (HDF5)
  void write(const std::string& data);  // appends
  void commit();

 private:
  std::string path_, tmp_;
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

// The one way to open a file that is written in place (a journal, a lock, the L2 blob): `flags`
// (O_RDWR, O_CREAT, O_APPEND ...) plus O_NOFOLLOW, O_NONBLOCK and O_CLOEXEC. Refused (Usage, one
// line naming `path` and `what`) when the name is a symlink, not a regular file, has another hard
// link (a planted second name of someone's file), or belongs to another user. Returns the fd.
int open_owned_file(const std::string& path, int flags, const std::string& what);

// For writers of side files: write(2) until done (EINTR retried; Io naming `path` on failure), and
// the directory a path is in ("." for a bare name).
void write_fully(int fd, const std::string& data, const std::string& path);
std::string parent_dir(const std::string& path);

}  // namespace moerun::io
