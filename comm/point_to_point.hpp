// PointToPoint: tagged messages between world ranks, the inter-node stage of the hierarchical
// all-to-all. Implementations: MPI (always), UCX (UCP tag API; see ucx_transport.hpp). Posting is
// non-blocking; wait_all() drives progress until everything posted completes or the timeout names
// the peers whose messages are missing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "comm/mpi.hpp"

namespace moerun::comm {

// One piece of a gathered send or scattered receive.
struct Segment {
  void* data;
  std::size_t bytes;
};

class PointToPoint {
 public:
  virtual ~PointToPoint() = default;
  virtual void post_send(int peer, const void* buf, std::size_t bytes, uint64_t tag) = 0;
  virtual void post_recv(int peer, void* buf, std::size_t bytes, uint64_t tag) = 0;
  // One message gathered from / scattered to several pieces (which must stay valid until wait_all).
  virtual void post_send_segments(int peer, std::vector<Segment> segments, uint64_t tag) = 0;
  virtual void post_recv_segments(int peer, std::vector<Segment> segments, uint64_t tag) = 0;
  virtual void wait_all(double timeout_s, const std::string& what) = 0;
  // Buffers used for messages from here on lie in [base, base + bytes) (a registered pool); the
  // previous pool is released. Transports that need no registration ignore it.
  virtual void set_pool(void* base, std::size_t bytes) {
    (void)base;
    (void)bytes;
  }
  virtual const char* name() const = 0;
};

class MpiPointToPoint final : public PointToPoint {
 public:
  explicit MpiPointToPoint(MPI_Comm world);
  void post_send(int peer, const void* buf, std::size_t bytes, uint64_t tag) override;
  void post_recv(int peer, void* buf, std::size_t bytes, uint64_t tag) override;
  void post_send_segments(int peer, std::vector<Segment> segments, uint64_t tag) override;
  void post_recv_segments(int peer, std::vector<Segment> segments, uint64_t tag) override;
  void wait_all(double timeout_s, const std::string& what) override;
  const char* name() const override { return "mpi"; }

 private:
  MPI_Datatype segments_type(const std::vector<Segment>& segments);
  std::vector<MPI_Datatype> types_;
  OwnedComm comm_;
  int rank_ = 0;
  std::vector<MPI_Request> recvs_, sends_;
  std::vector<int> recv_peers_, send_peers_;
};

}  // namespace moerun::comm
