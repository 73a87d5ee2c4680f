// Hierarchical all-to-all-v.
#include <exception>
#include "comm/hierarchical_alltoallv.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {
namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

HierarchicalAllToAllV::HierarchicalAllToAllV(MPI_Comm world, const Topology& topo, std::unique_ptr<PointToPoint> net, double timeout_s)
    : topo_(topo), net_(std::move(net)), timeout_s_(timeout_s) {
  MPI_CHECK(MPI_Comm_rank(world, &rank_));
  node_ = node_of(rank_);
  local_ = local_of(rank_);
  node_ranks_.assign(static_cast<std::size_t>(topo_.nodes), {});
  for (const RankInfo& r : topo_.ranks) node_ranks_[static_cast<std::size_t>(r.node)].push_back(r.rank);
  lmax_ = 0;
  for (const auto& n : node_ranks_) lmax_ = std::max(lmax_, static_cast<int>(n.size()));
  // The "node" is the topology's (virtual nodes included); its ranks share this host's memory.
  node_comm_ = OwnedComm::split(world, node_, local_);
  // A (virtual) node must share memory: its ranks exchange through one MPI-3 window.
  MPI_Comm shared;
  MPI_CHECK(MPI_Comm_split_type(node_comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
  int shared_size = 0, node_size = 0;
  MPI_CHECK(MPI_Comm_size(shared, &shared_size));
  MPI_CHECK(MPI_Comm_size(node_comm_, &node_size));
  MPI_CHECK(MPI_Comm_free(&shared));
  if (shared_size != node_size)
    fail(ErrorKind::Usage, "the hierarchical all-to-all needs every node's ranks on one host, but node ", node_,
         " spans hosts; choose --ranks-per-node to divide the ranks per host");
  // A rank's counts region: its send counts [P], the inbound blocks of the node pairs it is the
  // gateway of [nodes][lmax][lmax], and its receive counts when they are known [P].
  const std::size_t counts_bytes =
      (2 * static_cast<std::size_t>(topo_.world_size) + static_cast<std::size_t>(topo_.nodes) * lmax_ * lmax_) * sizeof(int64_t);
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  counts_shm_ = std::make_unique<NodeSharedMemory>(node_comm_, counts_bytes, timeout_s_, mine);
  data_shm_ = std::make_unique<NodeSharedMemory>(node_comm_, 1 << 20, timeout_s_, mine);
  net_->set_pool(data_shm_->region(local_), data_shm_->region_bytes());
}

HierarchicalAllToAllV::~HierarchicalAllToAllV() {
  data_shm_.reset();  // windows before the communicator they live on
  counts_shm_.reset();
}

int HierarchicalAllToAllV::out_gw(int a, int b) const {
  const auto& ra = node_ranks_[static_cast<std::size_t>(a)];
  return ra[static_cast<std::size_t>(b) % ra.size()];
}

int HierarchicalAllToAllV::in_gw(int b, int a) const {
  const auto& rb = node_ranks_[static_cast<std::size_t>(b)];
  return rb[static_cast<std::size_t>(a) % rb.size()];
}

void HierarchicalAllToAllV::exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                                            const ExchangePattern&) {
  const double t0 = now();
  ++seq_;
  const int P = topo_.world_size;
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  const int L = static_cast<int>(mine.size());
  auto* my_counts = reinterpret_cast<int64_t*>(counts_shm_->region(local_));
  std::copy(send.begin(), send.end(), my_counts);
  counts_shm_->fence();
  node_matrix_.resize(static_cast<std::size_t>(L) * P);
  for (int s = 0; s < L; ++s) std::memcpy(&node_matrix_[static_cast<std::size_t>(s) * P], counts_shm_->region(s), P * sizeof(int64_t));
  // One counts block per node pair, gateway to gateway.
  out_blocks_.assign(static_cast<std::size_t>(topo_.nodes), {});
  int64_t* inbound_area = my_counts + P;
  for (int b = 0; b < topo_.nodes; ++b) {
    if (b == node_) continue;
    const auto& rb = node_ranks_[static_cast<std::size_t>(b)];
    if (out_gw(node_, b) == rank_) {
      auto& blk = out_blocks_[static_cast<std::size_t>(b)];
      blk.resize(static_cast<std::size_t>(L) * rb.size());
      for (int s = 0; s < L; ++s)
        for (std::size_t q = 0; q < rb.size(); ++q) blk[s * rb.size() + q] = node_matrix_[static_cast<std::size_t>(s) * P + rb[q]];
      net_->post_send(in_gw(b, node_), blk.data(), blk.size() * sizeof(int64_t), tag(1));
    }
    if (in_gw(node_, b) == rank_)
      net_->post_recv(out_gw(b, node_), inbound_area + static_cast<std::size_t>(b) * lmax_ * lmax_,
                      rb.size() * static_cast<std::size_t>(L) * sizeof(int64_t), tag(1));
  }
  net_->wait_all(timeout_s_, what + " (counts between nodes)");
  counts_shm_->fence();
  inbound_.assign(static_cast<std::size_t>(topo_.nodes), {});
  for (int a = 0; a < topo_.nodes; ++a) {
    if (a == node_) continue;
    const std::size_t la = node_ranks_[static_cast<std::size_t>(a)].size();
    const auto* area =
        reinterpret_cast<const int64_t*>(counts_shm_->region(local_of(in_gw(node_, a)))) + P + static_cast<std::size_t>(a) * lmax_ * lmax_;
    inbound_[static_cast<std::size_t>(a)].assign(area, area + la * L);
  }
  recv.assign(static_cast<std::size_t>(P), 0);
  for (int s = 0; s < P; ++s) {
    const int a = node_of(s);
    recv[s] = a == node_ ? node_matrix_[static_cast<std::size_t>(local_of(s)) * P + rank_]
                         : inbound_[static_cast<std::size_t>(a)][static_cast<std::size_t>(local_of(s)) * L + local_];
  }
  lay_out();
  times_.counts += now() - t0;
}

void HierarchicalAllToAllV::share_known_counts(const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                                               const std::string& what) {
  const double t0 = now();
  ++seq_;
  const int P = topo_.world_size;
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  const int L = static_cast<int>(mine.size());
  const std::size_t recv_at = static_cast<std::size_t>(P) + static_cast<std::size_t>(topo_.nodes) * lmax_ * lmax_;
  auto* my_counts = reinterpret_cast<int64_t*>(counts_shm_->region(local_));
  std::copy(send.begin(), send.end(), my_counts);
  std::copy(recv.begin(), recv.end(), my_counts + recv_at);
  counts_shm_->fence();  // inside the node only: what remote ranks send us, each receiver knows
  node_matrix_.resize(static_cast<std::size_t>(L) * P);
  for (int s = 0; s < L; ++s) std::memcpy(&node_matrix_[static_cast<std::size_t>(s) * P], counts_shm_->region(s), P * sizeof(int64_t));
  inbound_.assign(static_cast<std::size_t>(topo_.nodes), {});
  for (int a = 0; a < topo_.nodes; ++a) {
    if (a == node_) continue;
    const auto& ra = node_ranks_[static_cast<std::size_t>(a)];
    auto& in = inbound_[static_cast<std::size_t>(a)];
    in.assign(ra.size() * static_cast<std::size_t>(L), 0);
    for (int q = 0; q < L; ++q) {
      const auto* their_recv = reinterpret_cast<const int64_t*>(counts_shm_->region(q)) + recv_at;
      for (std::size_t s = 0; s < ra.size(); ++s) in[s * L + q] = their_recv[ra[s]];
    }
  }
  // Senders on this node say what they send us: it must be what we expect.
  for (int s = 0; s < L; ++s)
    if (node_matrix_[static_cast<std::size_t>(s) * P + rank_] != recv[mine[s]])
      fail(ErrorKind::Comm, what, ": rank ", mine[s], " sends ", node_matrix_[static_cast<std::size_t>(s) * P + rank_], " bytes where ",
           recv[mine[s]], " were expected");
  // No second fence: start()'s fences come before any rank writes its next counts.
  lay_out();
  times_.counts += now() - t0;
}

void HierarchicalAllToAllV::lay_out() {
  const int P = topo_.world_size;
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  const int L = static_cast<int>(mine.size());
  // Layout: region of local rank r = [send area][receive area], pieces in world-rank order.
  recv_area_.assign(static_cast<std::size_t>(L), 0);
  send_displ_.assign(static_cast<std::size_t>(L), std::vector<std::size_t>(static_cast<std::size_t>(P), 0));
  recv_displ_.assign(static_cast<std::size_t>(L), std::vector<std::size_t>(static_cast<std::size_t>(P), 0));
  std::size_t need = 0;
  for (int r = 0; r < L; ++r) {
    std::size_t off = 0;
    for (int p = 0; p < P; ++p) {
      send_displ_[r][p] = off;
      off += static_cast<std::size_t>(node_matrix_[static_cast<std::size_t>(r) * P + p]);
    }
    const std::size_t area = (off + 63) / 64 * 64;
    recv_area_[r] = area;
    std::size_t roff = 0;
    for (int src = 0; src < P; ++src) {
      recv_displ_[r][src] = roff;
      const int a = node_of(src);
      roff += static_cast<std::size_t>(a == node_ ? node_matrix_[static_cast<std::size_t>(local_of(src)) * P + mine[r]]
                                                  : inbound_[static_cast<std::size_t>(a)][static_cast<std::size_t>(local_of(src)) * L + r]);
    }
    if (r == local_) {
      my_send_total_ = off;
      my_recv_total_ = roff;
    }
    need = std::max(need, area + roff);
  }
  if (data_shm_->reserve(need)) net_->set_pool(data_shm_->region(local_), data_shm_->region_bytes());
}

void* HierarchicalAllToAllV::lent_send_buffer(std::size_t bytes) {
  if (bytes > my_send_total_) fail(ErrorKind::Internal, "hier send_buffer larger than the counts exchanged");
  return data_shm_->region(local_);
}

void* HierarchicalAllToAllV::lent_recv_buffer(std::size_t bytes) {
  if (bytes > my_recv_total_) fail(ErrorKind::Internal, "hier recv_buffer larger than the counts exchanged");
  return data_shm_->region(local_) + recv_area_[static_cast<std::size_t>(local_)];
}

std::unique_ptr<PendingExchange> HierarchicalAllToAllV::start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                                              const std::vector<int64_t>& recv_bytes, const std::string& what) {
  const int P = topo_.world_size;
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  const int L = static_cast<int>(mine.size());
  for (int p = 0; p < P; ++p)
    if (send_bytes[p] != node_matrix_[static_cast<std::size_t>(local_) * P + p])
      fail(ErrorKind::Internal, what, ": payload counts differ from the counts exchanged before");
  auto M = [&](int s_local, int p) { return static_cast<std::size_t>(node_matrix_[static_cast<std::size_t>(s_local) * P + p]); };
  auto IN = [&](int a, int s_local, int q_local) {
    return static_cast<std::size_t>(inbound_[static_cast<std::size_t>(a)][static_cast<std::size_t>(s_local) * L + q_local]);
  };
  auto send_area = [&](int r) { return data_shm_->region(r); };
  auto recv_area = [&](int r) { return data_shm_->region(r) + recv_area_[static_cast<std::size_t>(r)]; };
  const double t0 = now();
  if (send != send_area(local_) && my_send_total_) std::memcpy(send_area(local_), send, my_send_total_);
  const double t1 = now();
  data_shm_->fence();  // every send area is written
  const double t2 = now();
  // Between nodes: one gathered message per node pair, scattered on arrival.
  for (int b = 0; b < topo_.nodes; ++b) {
    if (b == node_) continue;
    const auto& rb = node_ranks_[static_cast<std::size_t>(b)];
    if (out_gw(node_, b) == rank_) {
      std::vector<Segment> segs;
      for (int q : rb)
        for (int src = 0; src < L; ++src)
          if (M(src, q)) segs.push_back({send_area(src) + send_displ_[static_cast<std::size_t>(src)][q], M(src, q)});
      if (!segs.empty()) net_->post_send_segments(in_gw(b, node_), std::move(segs), tag(2));
    }
    if (in_gw(node_, b) == rank_) {
      std::vector<Segment> segs;
      for (int q = 0; q < L; ++q)
        for (std::size_t src = 0; src < rb.size(); ++src)
          if (IN(b, static_cast<int>(src), q))
            segs.push_back({recv_area(q) + recv_displ_[static_cast<std::size_t>(q)][rb[src]], IN(b, static_cast<int>(src), q)});
      if (!segs.empty()) net_->post_recv_segments(out_gw(b, node_), std::move(segs), tag(2));
    }
  }
  // Inside the node, while the network moves: pull my pieces from my node peers' send areas.
  char* my_recv = recv_area(local_);
  for (int src = 0; src < L; ++src) {
    const std::size_t n = M(src, rank_);
    if (n)
      std::memcpy(my_recv + recv_displ_[static_cast<std::size_t>(local_)][mine[src]],
                  send_area(src) + send_displ_[static_cast<std::size_t>(src)][rank_], n);
  }
  const double t3 = now();
  net_->wait_all(timeout_s_, what + " (rows between nodes)");
  const double t4 = now();
  data_shm_->fence();  // every receive area is complete
  const double t5 = now();
  if (recv != my_recv && my_recv_total_) std::memcpy(recv, my_recv, my_recv_total_);
  (void)recv_bytes;
  times_.stage1 += (t1 - t0) + (t3 - t2);
  times_.fences += (t2 - t1) + (t5 - t4);
  times_.network += t4 - t3;
  times_.stage3 += now() - t5;
  return std::make_unique<PendingExchange>();
}

}  // namespace moerun::comm
