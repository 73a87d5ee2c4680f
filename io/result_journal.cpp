// Result journal and atomic file writes (POSIX: open/write/fsync/rename, EINTR-safe).
#include "io/result_journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "base/error.hpp"
#include "base/log.hpp"
#include "io/output_file.hpp"

namespace moerun::io {

std::string journal_path(const std::string& output_path, int writer) {
  return writer == 0 ? output_path + ".journal" : output_path + ".journal." + std::to_string(writer);
}

std::vector<std::string> journal_files(const std::string& output_path) {
  const std::filesystem::path out(output_path);
  const std::string prefix = out.filename().string() + ".journal";
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent_dir(output_path), ec)) {
    const std::string name = e.path().filename().string();
    if (name == prefix) {
      files.push_back(e.path().string());
      continue;
    }
    if (name.rfind(prefix + ".", 0) != 0) continue;
    const std::string n = name.substr(prefix.size() + 1);
    if (!n.empty() && std::all_of(n.begin(), n.end(), ::isdigit)) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  // Read and removed by name: a FIFO or a device here would block the read or lose the device.
  for (const auto& f : files) check_output_target(f, "journal");
  return files;
}

std::unordered_map<std::string, Result> read_journals(const std::string& output_path, const JournalKeys& keys, JournalReadStats* stats) {
  std::unordered_map<std::string, Result> out;
  JournalReadStats st;
  for (const std::string& f : journal_files(output_path)) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      Result r;
      if (!result_from_json(line, &r)) {
        ++st.torn;
        continue;
      }
      const auto it = keys.find(r.id);
      if (it == keys.end() || it->second != r.key) {
        if (st.stale_ids.size() < 5) st.stale_ids.push_back(r.id);
        ++st.stale;
        continue;
      }
      out[r.id] = std::move(r);
    }
  }
  if (stats) *stats = st;
  return out;
}

void remove_journals(const std::string& output_path) {
  std::error_code ec;
  for (const std::string& f : journal_files(output_path)) std::filesystem::remove(f, ec);
}

ResultJournal::ResultJournal(const std::string& output_path, int writer, bool resume, const JournalKeys& keys)
    : path_(journal_path(output_path, writer)), keys_(keys) {
  check_output_target(output_path, "--output");
  // Opened by the one rule before anything is read from it: a link or a second name planted as the
  // journal is refused, not read as this run's results.
  fd_ = open_owned_file(path_, O_WRONLY | O_CREAT | O_APPEND | (resume ? 0 : O_TRUNC), "the journal");
  if (resume) {
    JournalReadStats st;
    try {
      finished_ = read_journals(output_path, keys_, &st);
    } catch (...) {
      ::close(std::exchange(fd_, -1));  // the destructor does not run when the constructor throws
      throw;
    }
    if (st.torn) log::warn(output_path, ".journal*: ignored ", st.torn, " incomplete journal line(s)");
    if (st.stale) {
      std::string ids;
      for (const auto& id : st.stale_ids) ids += (ids.empty() ? "" : ", ") + id;
      log::warn(output_path, ".journal*: ", st.stale, " journaled result(s) were made for other requests, another model or ",
                "other routing options (", ids, st.stale > static_cast<int64_t>(st.stale_ids.size()) ? ", ..." : "", "); recomputing them");
    }
  }
  // A torn last line from a kill must not glue onto the next record.
  if (resume && ::lseek(fd_, 0, SEEK_END) > 0) {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(-1, std::ios::end);
    char last = '\n';
    in.get(last);
    if (last != '\n') write_fully(fd_, "\n", path_);
  }
}

ResultJournal::~ResultJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultJournal::append(const Result& r) {
  Result keyed = r;
  const auto it = keys_.find(r.id);
  if (it != keys_.end()) keyed.key = it->second;
  write_fully(fd_, result_to_json(keyed, true) + "\n", path_);
  dirty_ = true;
  ++appended_;
  finished_[r.id] = std::move(keyed);
}

void ResultJournal::sync() {
  if (!dirty_ || fd_ < 0) return;
  if (::fdatasync(fd_) != 0) fail(ErrorKind::Io, path_, ": fdatasync failed: ", std::strerror(errno));
  dirty_ = false;
  ++syncs_;
}

void ResultJournal::close() {
  sync();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace moerun::io
