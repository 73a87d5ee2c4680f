// The few small collectives the runtime needs outside the all-to-all: step control, error
// agreement, statistics reduction. Thin, checked wrappers so runtime/ never calls MPI directly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace moerun::comm {

int rank_of(MPI_Comm comm);
int size_of(MPI_Comm comm);
void allreduce_sum(std::vector<int64_t>& values, MPI_Comm comm);
// The same, giving up after timeout_s (> 0) with ErrorKind::Comm naming `what`: point-to-point
// through rank 0, so the error names the ranks that did not arrive (rank 0) or rank 0 (others).
void allreduce_sum_timed(std::vector<int64_t>& values, MPI_Comm comm, double timeout_s, const std::string& what);
int64_t allreduce_max(int64_t value, MPI_Comm comm);
// Element-wise maximum on every rank, giving up after timeout_s (> 0) with ErrorKind::Comm naming `what`.
void allreduce_max_timed(std::vector<int64_t>& values, MPI_Comm comm, double timeout_s, const std::string& what);
int64_t allreduce_min(int64_t value, MPI_Comm comm);
void reduce_sum_to_root(std::vector<int64_t>& values, MPI_Comm comm);  // result valid on rank 0
void reduce_max_to_root(std::vector<double>& values, MPI_Comm comm);
void reduce_sum_to_root(std::vector<double>& values, MPI_Comm comm);
// Every rank's vector (all the same length), concatenated in rank order on every rank; giving up
// after timeout_s (> 0) with ErrorKind::Comm naming `what`.
std::vector<int64_t> allgather_timed(const std::vector<int64_t>& values, MPI_Comm comm, double timeout_s, const std::string& what);
// Every rank's vector (all the same length), concatenated in rank order on rank 0.
std::vector<double> gather_to_root(const std::vector<double>& values, MPI_Comm comm);
void barrier(MPI_Comm comm);
// A barrier that sleeps between polls, so waiting ranks leave the cores to the ones working.
void idle_barrier(MPI_Comm comm);
// Rank 0's string on every rank.
std::string broadcast_string(const std::string& value, MPI_Comm comm);

// Set-up, where a stopped or dead rank must not hang the job: the same collectives with a
// deadline (timeout_s > 0), point-to-point through rank 0 so that the error names the ranks that
// did not arrive (ErrorKind::Comm, "... waiting for rank(s) N (--comm-timeout)").
void barrier_timed(MPI_Comm comm, double timeout_s, const std::string& what);
std::string broadcast_string_timed(const std::string& value, MPI_Comm comm, double timeout_s, const std::string& what);
// Which rank reports a set-up failure: every rank gives its exit code (0: it did not fail) and
// whether it has a message; all get the highest code and the lowest rank with a message (-1: none).
struct FailureAgreement {
  int64_t code = 0;
  int reporter = -1;
  int64_t reporter_code = 0;
};
FailureAgreement agree_on_failure(int64_t code, bool has_message, MPI_Comm comm, double timeout_s, const std::string& what);

}  // namespace moerun::comm
