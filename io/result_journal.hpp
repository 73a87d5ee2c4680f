// ResultJournal: results appended (and fsync'ed) as each request finishes, so a killed run loses
// nothing already done; `--resume` reads it back. The final output is written once, atomically
// (temp file + rename), in input order.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "io/requests.hpp"

namespace moerun::io {

class ResultJournal {
 public:
  // Opens OUTPUT.journal. With `resume`, finished results are loaded (a torn last line is ignored);
  // without, any old journal is discarded. Unwritable paths are ErrorKind::Io.
  ResultJournal(const std::string& output_path, bool resume);
  ~ResultJournal();
  ResultJournal(const ResultJournal&) = delete;
  ResultJournal& operator=(const ResultJournal&) = delete;

  const std::unordered_map<std::string, Result>& finished() const { return finished_; }
  void append(const Result& r);
  // Removes the journal (after the final file is in place).
  void remove();
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
