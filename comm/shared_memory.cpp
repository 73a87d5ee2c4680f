// MPI-3 shared windows: allocate, query peers' bases, passive-target epoch with Win_sync fences.
#include <exception>
#include "comm/shared_memory.hpp"

#include "base/error.hpp"
#include <chrono>
#include <sstream>

#include "comm/alltoallv.hpp"
#include "comm/backoff.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

NodeSharedMemory::NodeSharedMemory(MPI_Comm node, std::size_t initial_bytes, double timeout_s, std::vector<int> world_ranks)
    : node_(OwnedComm::dup(node)), timeout_s_(timeout_s), world_ranks_(std::move(world_ranks)) {
  MPI_CHECK(MPI_Comm_rank(node_, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node_, &local_size_));
  allocate(initial_bytes);
}

NodeSharedMemory::~NodeSharedMemory() {
  if (mpi_usable_for_cleanup()) release();  // MPI_Win_free is collective: skipped while aborting
}

void NodeSharedMemory::allocate(std::size_t bytes) {
  bytes = (std::max<std::size_t>(bytes, 64) + kHeader + 4095) / 4096 * 4096;
  MPI_Info info;
  MPI_CHECK(MPI_Info_create(&info));
  MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  char* mine = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, node_, &mine, &win_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) mpi_fail(rc, "MPI_Win_allocate_shared", __FILE__, __LINE__);
  bases_.assign(static_cast<std::size_t>(local_size_), nullptr);
  for (int r = 0; r < local_size_; ++r) {
    MPI_Aint size = 0;
    int disp = 0;
    MPI_CHECK(MPI_Win_shared_query(win_, r, &size, &disp, &bases_[static_cast<std::size_t>(r)]));
  }
  MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
  bytes_ = bytes - kHeader;
  // Epochs restart at 0; nobody may look at them before everyone has reset its own.
  epoch_ = 0;
  __atomic_store_n(epoch_of(local_rank_), uint64_t{0}, __ATOMIC_RELEASE);
  MPI_CHECK(MPI_Win_sync(win_));
  MPI_CHECK(MPI_Barrier(node_));
}

void NodeSharedMemory::release() {
  if (win_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
  win_ = MPI_WIN_NULL;
}

bool NodeSharedMemory::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return false;
  fence();  // nobody still reads the old regions
  release();
  allocate(bytes + bytes / 2);  // grow geometrically: sizes creep up with batch composition
  return true;
}

void NodeSharedMemory::fence() {
  MPI_CHECK(MPI_Win_sync(win_));
  ++epoch_;
  __atomic_store_n(epoch_of(local_rank_), epoch_, __ATOMIC_RELEASE);
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  for (int r = 0; r < local_size_;) {
    if (__atomic_load_n(epoch_of(r), __ATOMIC_ACQUIRE) >= epoch_) {
      ++r;
      continue;
    }
    backoff.pause();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s_) {
      std::ostringstream os;
      for (int q = 0; q < local_size_; ++q)
        if (__atomic_load_n(epoch_of(q), __ATOMIC_ACQUIRE) < epoch_) os << (os.tellp() > 0 ? ", " : "") << world_ranks_[q];
      fail(ErrorKind::Comm, "no progress for ", timeout_s_, " s at a node barrier; waiting for rank(s) ", os.str(), " (--comm-timeout)");
    }
  }
  MPI_CHECK(MPI_Win_sync(win_));
}

}  // namespace moerun::comm
