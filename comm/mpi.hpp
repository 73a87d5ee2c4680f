// MPI wrapper: MPI_CHECK (errors become moerun::Error of kind Comm with MPI's message) and the RAII
// session that initialises and finalises MPI. Nothing outside comm/ calls MPI directly.
#pragma once
#include <mpi.h>

#include <string>

#include "base/error.hpp"

namespace moerun::comm {

[[noreturn]] void mpi_fail(int code, const char* call, const char* file, int line);

#define MPI_CHECK(expr)                                                                                     \
  do {                                                                                                      \
    int moerun_mpi_rc_ = (expr);                                                                            \
    if (moerun_mpi_rc_ != MPI_SUCCESS) ::moerun::comm::mpi_fail(moerun_mpi_rc_, #expr, __FILE__, __LINE__); \
  } while (0)

// An owned communicator (from MPI_Comm_dup/split): freed once, in the destructor. While an error
// unwinds the job is being aborted and peers may be dead, so the (collective) free is skipped.
class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(MPI_Comm c) : comm_(c) {}
  static OwnedComm dup(MPI_Comm c);
  static OwnedComm split(MPI_Comm c, int color, int key);
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;
  OwnedComm(OwnedComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  OwnedComm& operator=(OwnedComm&& o) noexcept;
  ~OwnedComm();
  MPI_Comm get() const { return comm_; }
  operator MPI_Comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// True when MPI may still be called collectively: not finalized, no exception unwinding.
bool mpi_usable_for_cleanup();

// MPI_Init_thread on construction (errors returned, not fatal), MPI_Finalize on destruction --
// except while an exception unwinds: then peers may be waiting in a collective and MPI_Finalize
// would hang, so the decision is left to finish_after_error() once the error is known.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ends every rank of the job with `code` (used after a fatal error on one rank).
  [[noreturn]] static void abort(int code);
  // After an error escaped a command: every rank failing together (`agreed`, or one rank alone)
  // finalizes and returns; one rank failing alone in a job ends the job with `code`.
  static void finish_after_error(bool agreed, int code);

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace moerun::comm
