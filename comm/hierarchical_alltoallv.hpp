// HierarchicalAllToAllV (DESIGN §4): an all-to-all-v in which only one aggregated message per node
// pair crosses the network. Every rank's send and receive areas live in the node's shared window.
//   1. Inside a node, every rank copies the pieces its node peers send it straight from their send
//      areas into its receive area (one copy, no MPI).
//   2. Between nodes, the gateway of node pair (a→b) — local rank b mod L_a, so node pairs are
//      spread over the node's ranks rather than funnelled through one leader — sends ONE message
//      gathered from all of node a's send areas (destination-major) to the gateway of node a on node
//      b (local rank a mod L_b), which scatters it straight into node b's receive areas. No staging.
//   3. Nothing: the data is in place. An exchange handle's buffers are the window's send and
//      receive areas, so the caller writes and reads there (a handle sending from the caller's own
//      memory gets one copy in).
// Counts take the same path first (node matrix in shared memory, one block per node pair), unless
// every rank knows its own (a reply, plan_known): then only the node's shared memory. The payload
// of start() must follow the counts with the same send counts; the exchange is complete when it
// is posted (ExchangeHandle::post; test() is then true at once).
#pragma once
#include <memory>
#include <vector>

#include "comm/alltoallv.hpp"
#include "comm/point_to_point.hpp"
#include "comm/shared_memory.hpp"
#include "comm/topology.hpp"

namespace moerun::comm {

// Seconds spent per stage, accumulated (bench a2a reports them to show where the time goes).
struct HierStageTimes {
  double counts = 0;  // counts: node matrix, blocks between gateways
  double stage1 = 0;  // copy into the send area (callers not using send_buffer) and node-local pulls
  double fences = 0;  // node barriers around the exchange
  double network = 0;  // one message per node pair
  double stage3 = 0;  // copy out of the receive area (callers not using recv_buffer)
};

class HierarchicalAllToAllV final : public AllToAllV {
 public:
  HierarchicalAllToAllV(MPI_Comm world, const Topology& topo, std::unique_ptr<PointToPoint> net, double timeout_s);
  ~HierarchicalAllToAllV() override;
  int size() const override { return topo_.world_size; }
  const char* transport() const { return net_->name(); }
  const HierStageTimes& stage_times() const { return times_; }
  void reset_stage_times() { times_ = {}; }

 protected:
  void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                       const ExchangePattern& pattern) override;
  // Complete when it returns: the pending exchange has no requests, so test() is true at once.
  std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                         const std::vector<int64_t>& recv_bytes, const std::string& what) override;
  void wait(PendingExchange&) override {}
  // Counts every rank knows (a reply): the node's matrix through shared memory, no network; what
  // remote ranks send each local rank is what that rank expects.
  void share_known_counts(const std::vector<int64_t>& send, const std::vector<int64_t>& recv, const std::string& what) override;
  void* lent_send_buffer(std::size_t bytes) override;
  void* lent_recv_buffer(std::size_t bytes) override;

 private:
  int out_gw(int a, int b) const;  // world rank on node a that sends a's rows for node b
  int in_gw(int b, int a) const;  // world rank on node b that receives a's rows
  int local_of(int world) const { return topo_.ranks[static_cast<std::size_t>(world)].local_rank; }
  int node_of(int world) const { return topo_.ranks[static_cast<std::size_t>(world)].node; }
  uint64_t tag(int kind) const { return (seq_ << 2) | static_cast<uint64_t>(kind); }
  // From node_matrix_ and inbound_: every local rank's send and receive areas in the window.
  void lay_out();

  Topology topo_;
  int rank_, node_, local_, lmax_;
  std::vector<std::vector<int>> node_ranks_;  // [node] world ranks by local rank
  OwnedComm node_comm_;
  std::unique_ptr<PointToPoint> net_;
  double timeout_s_;
  std::unique_ptr<NodeSharedMemory> counts_shm_, data_shm_;
  uint64_t seq_ = 0;
  HierStageTimes times_;
  // From the last exchange_counts: bytes from each local rank to each world rank ([local][P]),
  // and from each rank of every remote node to each local rank ([node][src local][dst local]).
  std::vector<int64_t> node_matrix_;
  std::vector<std::vector<int64_t>> inbound_;
  std::vector<std::vector<int64_t>> out_blocks_;  // send buffers of the counts blocks
  // Layout of the last exchange: per local rank, start of its receive area in its region, and the
  // offset of each piece in the sender's send area / receiver's receive area.
  std::vector<std::size_t> recv_area_;  // [local]
  std::vector<std::vector<std::size_t>> send_displ_;  // [local][world dest]
  std::vector<std::vector<std::size_t>> recv_displ_;  // [local][world source]
  std::size_t my_send_total_ = 0, my_recv_total_ = 0;
};

}  // namespace moerun::comm
