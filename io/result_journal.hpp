// ResultJournal: results appended as each request finishes and synced once per step, so a killed
// run loses at most the step in flight; `--resume` reads them back. Each router rank writes its own file
// (OUTPUT.journal for router 0, OUTPUT.journal.N for router N) and a resume reads all of them, so a
// run killed with one layout resumes with another. The final output is written once, atomically
// (io/output_file.hpp), in input order.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "io/requests.hpp"

namespace moerun::io {

// Request id -> the key its result must carry: the request's own fingerprint and the run's (model,
// routing options). A journal entry counts as finished only when its key matches, so a journal
// from another input, model or options is never taken for this run's results.
using JournalKeys = std::unordered_map<std::string, std::string>;

struct JournalReadStats {
  int64_t torn = 0;  // unparseable (e.g. cut by a kill) lines
  int64_t stale = 0;  // entries whose key does not match this run (recomputed)
  std::vector<std::string> stale_ids;  // the first few, for the warning
};

std::string journal_path(const std::string& output_path, int writer);
std::vector<std::string> journal_files(const std::string& output_path);
// The results in every journal of OUTPUT whose key matches `keys` (later entries win).
std::unordered_map<std::string, Result> read_journals(const std::string& output_path, const JournalKeys& keys,
                                                      JournalReadStats* stats = nullptr);
void remove_journals(const std::string& output_path);

class ResultJournal {
 public:
  // Opens the journal of router `writer`. With `resume`, the finished results of all journals are
  // loaded (those whose key matches; others are recomputed, with a warning); without, this
  // writer's file starts empty (the caller removed old journals first). Unwritable paths are
  // ErrorKind::Io. `keys` must outlive the journal.
  ResultJournal(const std::string& output_path, int writer, bool resume, const JournalKeys& keys);
  ~ResultJournal();
  ResultJournal(const ResultJournal&) = delete;
  ResultJournal& operator=(const ResultJournal&) = delete;

  const std::unordered_map<std::string, Result>& finished() const { return finished_; }
  // Appends without waiting for the disk; sync() makes every appended result durable with one
  // fdatasync (group commit: once per step, not once per request).
  void append(const Result& r);
  void sync();
  void close();  // syncs first
  const std::string& path() const { return path_; }
  int64_t appended() const { return appended_; }
  int64_t syncs() const { return syncs_; }

 private:
  std::string path_;
  const JournalKeys& keys_;
  int fd_ = -1;
  bool dirty_ = false;
  int64_t appended_ = 0, syncs_ = 0;
  std::unordered_map<std::string, Result> finished_;
};

}  // namespace moerun::io
