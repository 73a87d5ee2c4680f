// NCCL intra-node exchange against MPI_Alltoallv on device buffers. Needs a GPU: on a machine
// without one it is skipped with that reason (ctest label gpu).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <random>

#include "base/cuda_device.hpp"
#include "base/error.hpp"
#include "comm/nccl_transport.hpp"

namespace moerun::comm {
namespace {

TEST(Nccl, ExchangeMatchesMpiAlltoallv) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: the NCCL path is not selected here";
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > cuda_device_count()) {
    // The exchange refuses this (NCCL needs one GPU per rank) with a Usage error: check that, then skip.
    EXPECT_THROW(NcclNodeExchange{MPI_COMM_WORLD}, Error);
    GTEST_SKIP() << size << " ranks, " << cuda_device_count() << " GPU(s): NCCL needs one GPU per rank";
  }
  NcclNodeExchange nccl(MPI_COMM_WORLD);
  std::mt19937 g(static_cast<uint32_t>(rank) + 1);
  std::vector<int64_t> sc(static_cast<std::size_t>(size)), rc(sc.size());
  std::vector<int> isc(sc.size()), irc(sc.size()), sd(sc.size()), rd(sc.size());
  int64_t ts = 0;
  for (int p = 0; p < size; ++p) {
    sc[p] = g() % 4096;
    isc[p] = static_cast<int>(sc[p]);
    sd[p] = static_cast<int>(ts);
    ts += sc[p];
  }
  MPI_Alltoall(isc.data(), 1, MPI_INT, irc.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int64_t tr = 0;
  for (int p = 0; p < size; ++p) {
    rc[p] = irc[p];
    rd[p] = static_cast<int>(tr);
    tr += rc[p];
  }
  std::vector<char> send(static_cast<std::size_t>(ts)), want(static_cast<std::size_t>(tr)), got(want.size());
  for (auto& c : send) c = static_cast<char>(g());
  MPI_Alltoallv(send.data(), isc.data(), sd.data(), MPI_BYTE, want.data(), irc.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD);
  void *ds = nullptr, *dr = nullptr;
  ASSERT_EQ(cudaMalloc(&ds, static_cast<std::size_t>(ts) + 1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dr, static_cast<std::size_t>(tr) + 1), cudaSuccess);
  cudaMemcpy(ds, send.data(), static_cast<std::size_t>(ts), cudaMemcpyHostToDevice);
  nccl.exchange(ds, sc, dr, rc);
  cudaMemcpy(got.data(), dr, static_cast<std::size_t>(tr), cudaMemcpyDeviceToHost);
  cudaFree(ds);
  cudaFree(dr);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace moerun::comm
