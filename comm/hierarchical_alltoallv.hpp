// HierarchicalAllToAllV (DESIGN §4): an all-to-all-v in three stages so that only one aggregated
// message per node pair crosses the network.
//   1. Inside node a, every rank writes its rows for node b into the staging region of the rank
//      that talks to node b (gateway out_gw(a,b) = local rank b mod L_a: node pairs are spread
//      over the node's ranks, not funnelled through one leader); rows for its own node go straight
//      into the destination's landing region. Shared memory (MPI-3 window), one copy.
//   2. Each gateway sends its staging region as one message to the gateway of node a on node b
//      (in_gw(b,a) = local rank a mod L_b) over the PointToPoint transport (UCX or MPI).
//   3. Inside node b every rank copies its pieces out of the inbound staging regions and its
//      landing region into its receive buffer.
// Counts take the same path first (node matrix in shared memory, one block per node pair). The
// payload of start() must follow exchange_counts() with the same send counts; the exchange is
// complete when start() returns (wait() is free).
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
  double counts = 0;       // counts: node matrix, blocks between gateways
  double stage1 = 0;       // copies into landing / outbound staging
  double fences = 0;       // node barriers around the network stage
  double network = 0;      // one message per node pair
  double stage3 = 0;       // copies out to the receive buffer
};

class HierarchicalAllToAllV final : public AllToAllV {
 public:
  HierarchicalAllToAllV(MPI_Comm world, const Topology& topo, std::unique_ptr<PointToPoint> net, double timeout_s);
  ~HierarchicalAllToAllV() override;
  void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                       const ExchangePattern& pattern = {}) override;
  std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                         const std::vector<int64_t>& recv_bytes, const std::string& what) override;
  void wait(PendingExchange&) override {}
  int size() const override { return topo_.world_size; }
  const char* transport() const { return net_->name(); }
  const HierStageTimes& stage_times() const { return times_; }
  void reset_stage_times() { times_ = {}; }

 private:
  int out_gw(int a, int b) const;  // world rank on node a that sends a's rows for node b
  int in_gw(int b, int a) const;   // world rank on node b that receives a's rows
  int local_of(int world) const { return topo_.ranks[static_cast<std::size_t>(world)].local_rank; }
  int node_of(int world) const { return topo_.ranks[static_cast<std::size_t>(world)].node; }
  uint64_t tag(int kind) const { return (seq_ << 2) | static_cast<uint64_t>(kind); }

  Topology topo_;
  int rank_, node_, local_, lmax_;
  std::vector<std::vector<int>> node_ranks_;   // [node] world ranks by local rank
  MPI_Comm node_comm_ = MPI_COMM_NULL;
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
};

}  // namespace moerun::comm
