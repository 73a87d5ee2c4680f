// UcxPointToPoint: the inter-node transport over UCX (UCP tag API). One context and one worker per
// rank; worker addresses are exchanged over MPI once; endpoints are created lazily, with error
// handling mode PEER so a dead peer surfaces as an error naming it rather than a hang. Progress is
// explicit (wait_all drives ucp_worker_progress). The node's staging pool is registered once per
// (re)allocation (set_pool) and its memory handle passed with every message in it. UCX picks its
// transports itself; UCX_TLS=tcp,self or shm,self restrict it (both are tested).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/point_to_point.hpp"

namespace moerun::comm {

class UcxPointToPoint final : public PointToPoint {
 public:
  // peer_errors: UCX error mode PEER for -1 peers on other hosts, 0 none, 1 all (TransportConfig).
  UcxPointToPoint(MPI_Comm world, int peer_errors = -1);
  ~UcxPointToPoint() override;
  void post_send(int peer, const void* buf, std::size_t bytes, uint64_t tag) override;
  void post_recv(int peer, void* buf, std::size_t bytes, uint64_t tag) override;
  void post_send_segments(int peer, std::vector<Segment> segments, uint64_t tag) override;
  void post_recv_segments(int peer, std::vector<Segment> segments, uint64_t tag) override;
  void wait_all(double timeout_s, const std::string& what) override;
  void set_pool(void* base, std::size_t bytes) override;
  const char* name() const override { return "ucx"; }
  // Names of the transports UCX chose for the endpoint to `peer` (for the start-up layout).
  std::string describe() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// True when this build has UCX.
bool ucx_available();

}  // namespace moerun::comm
