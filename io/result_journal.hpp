// ResultJournal: results appended (and fsync'ed) as each request finishes, so a killed run loses
// nothing already done; `--resume` reads them back. Each router rank writes its own file
// (OUTPUT.journal for router 0, OUTPUT.journal.N for router N) and a resume reads all of them, so a
// run killed with one layout resumes with another. The final output is written once, atomically
// (temp file + rename), in input order.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "io/requests.hpp"

namespace moerun::io {

std::string journal_path(const std::string& output_path, int writer);
std::vector<std::string> journal_files(const std::string& output_path);
// Every result in every journal of OUTPUT (torn lines ignored, counted in `torn`).
std::unordered_map<std::string, Result> read_journals(const std::string& output_path, int64_t* torn = nullptr);
void remove_journals(const std::string& output_path);

class ResultJournal {
 public:
  // Opens the journal of router `writer`. With `resume`, the finished results of all journals are
  // loaded; without, this writer's file starts empty (the caller removed old journals first).
  // Unwritable paths are ErrorKind::Io.
  ResultJournal(const std::string& output_path, int writer, bool resume);
  ~ResultJournal();
  ResultJournal(const ResultJournal&) = delete;
  ResultJournal& operator=(const ResultJournal&) = delete;

  const std::unordered_map<std::string, Result>& finished() const { return finished_; }
  void append(const Result& r);
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::unordered_map<std::string, Result> finished_;
};

// Writes lines to `path` atomically: PATH.tmp, fsync, rename, fsync of the directory.
void write_file_atomically(const std::string& path, const std::vector<std::string>& lines);

// Checks early that `path` can be created (its directory exists and is writable).
void check_writable(const std::string& path);

}  // namespace moerun::io
