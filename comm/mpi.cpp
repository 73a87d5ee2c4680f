// MPI session and error translation.
#include "comm/mpi.hpp"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

namespace moerun::comm {

void mpi_fail(int code, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) len = 0;
  throw Error(ErrorKind::Comm,
              str("MPI: ", call, " failed: ", std::string(msg, static_cast<std::size_t>(len)), " (", file, ":", line, ")"));
}

bool mpi_usable_for_cleanup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return !finalized && std::uncaught_exceptions() == 0;
}

OwnedComm OwnedComm::dup(MPI_Comm c) {
  MPI_Comm out;
  MPI_CHECK(MPI_Comm_dup(c, &out));
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return OwnedComm(out);
}

OwnedComm OwnedComm::split(MPI_Comm c, int color, int key) {
  MPI_Comm out;
  MPI_CHECK(MPI_Comm_split(c, color, key, &out));
  return OwnedComm(out);
}

OwnedComm& OwnedComm::operator=(OwnedComm&& o) noexcept {
  if (this != &o) {
    if (comm_ != MPI_COMM_NULL && mpi_usable_for_cleanup()) MPI_Comm_free(&comm_);
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

OwnedComm::~OwnedComm() {
  if (comm_ != MPI_COMM_NULL && mpi_usable_for_cleanup()) MPI_Comm_free(&comm_);
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiSession::~MpiSession() {
  if (std::uncaught_exceptions() > 0) return;  // finish_after_error decides
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::finish_after_error(bool agreed, int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!agreed && size > 1) abort(code);
  MPI_Finalize();
}

void MpiSession::abort(int code) {
  // MPI_Abort may not return, or (with a dead peer and mpirun --enable-recovery) may never finish:
  // leave with the code regardless after a grace period.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace moerun::comm
