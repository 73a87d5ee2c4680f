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
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

HierarchicalAllToAllV::HierarchicalAllToAllV(MPI_Comm world, const Topology& topo, std::unique_ptr<PointToPoint> net,
                                             double timeout_s)
    : topo_(topo), net_(std::move(net)), timeout_s_(timeout_s) {
  MPI_CHECK(MPI_Comm_rank(world, &rank_));
  node_ = node_of(rank_);
  local_ = local_of(rank_);
  node_ranks_.assign(static_cast<std::size_t>(topo_.nodes), {});
  for (const RankInfo& r : topo_.ranks) node_ranks_[static_cast<std::size_t>(r.node)].push_back(r.rank);
  lmax_ = 0;
  for (const auto& n : node_ranks_) lmax_ = std::max(lmax_, static_cast<int>(n.size()));
  // The "node" is the topology's (virtual nodes included); its ranks share this host's memory.
  MPI_CHECK(MPI_Comm_split(world, node_, local_, &node_comm_));
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
  const std::size_t counts_bytes =
      (static_cast<std::size_t>(topo_.world_size) + static_cast<std::size_t>(topo_.nodes) * lmax_ * lmax_) * sizeof(int64_t);
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  counts_shm_ = std::make_unique<NodeSharedMemory>(node_comm_, counts_bytes, timeout_s_, mine);
  data_shm_ = std::make_unique<NodeSharedMemory>(node_comm_, 1 << 20, timeout_s_, mine);
  net_->set_pool(data_shm_->region(local_), data_shm_->region_bytes());
}

HierarchicalAllToAllV::~HierarchicalAllToAllV() {
  data_shm_.reset();
  counts_shm_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && std::uncaught_exceptions() == 0 && node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
}

int HierarchicalAllToAllV::out_gw(int a, int b) const {
  const auto& ra = node_ranks_[static_cast<std::size_t>(a)];
  return ra[static_cast<std::size_t>(b) % ra.size()];
}

int HierarchicalAllToAllV::in_gw(int b, int a) const {
  const auto& rb = node_ranks_[static_cast<std::size_t>(b)];
  return rb[static_cast<std::size_t>(a) % rb.size()];
}

void HierarchicalAllToAllV::exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv,
                                            const std::string& what, const ExchangePattern&) {
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
    const auto* area = reinterpret_cast<const int64_t*>(counts_shm_->region(local_of(in_gw(node_, a)))) + P +
                       static_cast<std::size_t>(a) * lmax_ * lmax_;
    inbound_[static_cast<std::size_t>(a)].assign(area, area + la * L);
  }
  recv.assign(static_cast<std::size_t>(P), 0);
  for (int s = 0; s < P; ++s) {
    const int a = node_of(s);
    recv[s] = a == node_ ? node_matrix_[static_cast<std::size_t>(local_of(s)) * P + rank_]
                         : inbound_[static_cast<std::size_t>(a)][static_cast<std::size_t>(local_of(s)) * L + local_];
  }
  times_.counts += now() - t0;
}

std::unique_ptr<PendingExchange> HierarchicalAllToAllV::start(const void* send, const std::vector<int64_t>& send_bytes,
                                                              void* recv, const std::vector<int64_t>& recv_bytes,
                                                              const std::string& what) {
  const int P = topo_.world_size;
  const auto& mine = node_ranks_[static_cast<std::size_t>(node_)];
  const int L = static_cast<int>(mine.size());
  for (int p = 0; p < P; ++p)
    if (send_bytes[p] != node_matrix_[static_cast<std::size_t>(local_) * P + p])
      fail(ErrorKind::Internal, what, ": payload counts differ from the counts exchanged before");
  auto M = [&](int s_local, int p) { return node_matrix_[static_cast<std::size_t>(s_local) * P + p]; };
  auto IN = [&](int a, int s_local, int q_local) {
    return inbound_[static_cast<std::size_t>(a)][static_cast<std::size_t>(s_local) * L + q_local];
  };
  // Region layout of every local rank r: [landing][outbound staging per node it gateways][inbound
  // staging per node it gateways]; pieces inside a staging area are ordered destination-major.
  std::vector<std::size_t> size(static_cast<std::size_t>(L), 0);
  std::vector<std::size_t> out_off(static_cast<std::size_t>(topo_.nodes), 0), in_off(out_off.size(), 0);
  std::vector<std::size_t> out_len(out_off.size(), 0), in_len(out_off.size(), 0);
  for (int r = 0; r < L; ++r) {
    std::size_t s = 0;
    for (int src = 0; src < L; ++src) s += static_cast<std::size_t>(M(src, mine[r]));
    size[r] = s;
  }
  for (int b = 0; b < topo_.nodes; ++b) {
    if (b == node_) continue;
    const int g = local_of(out_gw(node_, b));
    std::size_t len = 0;
    for (int q : node_ranks_[static_cast<std::size_t>(b)])
      for (int src = 0; src < L; ++src) len += static_cast<std::size_t>(M(src, q));
    out_off[b] = size[g];
    out_len[b] = len;
    size[g] += len;
  }
  for (int a = 0; a < topo_.nodes; ++a) {
    if (a == node_) continue;
    const int g = local_of(in_gw(node_, a));
    const int la = static_cast<int>(node_ranks_[static_cast<std::size_t>(a)].size());
    std::size_t len = 0;
    for (int q = 0; q < L; ++q)
      for (int src = 0; src < la; ++src) len += static_cast<std::size_t>(IN(a, src, q));
    in_off[a] = size[g];
    in_len[a] = len;
    size[g] += len;
  }
  if (data_shm_->reserve(*std::max_element(size.begin(), size.end())))
    net_->set_pool(data_shm_->region(local_), data_shm_->region_bytes());

  // Stage 1: my rows into landing regions (same node) or gateways' outbound staging.
  const double t1 = now();
  const char* in = static_cast<const char*>(send);
  std::size_t off = 0;
  for (int p = 0; p < P; ++p) {
    const std::size_t n = static_cast<std::size_t>(send_bytes[p]);
    if (n) {
      const int b = node_of(p);
      char* dst;
      if (b == node_) {
        std::size_t o = 0;
        for (int src = 0; src < local_; ++src) o += static_cast<std::size_t>(M(src, p));
        dst = data_shm_->region(local_of(p)) + o;
      } else {
        std::size_t o = out_off[b];
        for (int q : node_ranks_[static_cast<std::size_t>(b)]) {
          if (q == p) break;
          for (int src = 0; src < L; ++src) o += static_cast<std::size_t>(M(src, q));
        }
        for (int src = 0; src < local_; ++src) o += static_cast<std::size_t>(M(src, p));
        dst = data_shm_->region(local_of(out_gw(node_, b))) + o;
      }
      std::memcpy(dst, in + off, n);
    }
    off += n;
  }
  const double t2 = now();
  data_shm_->fence();
  const double t3 = now();
  // Stage 2: one message per node pair, gateway to gateway.
  char* my_region = data_shm_->region(local_);
  for (int b = 0; b < topo_.nodes; ++b) {
    if (b == node_) continue;
    if (out_gw(node_, b) == rank_ && out_len[b]) net_->post_send(in_gw(b, node_), my_region + out_off[b], out_len[b], tag(2));
    if (in_gw(node_, b) == rank_ && in_len[b]) net_->post_recv(out_gw(b, node_), my_region + in_off[b], in_len[b], tag(2));
  }
  net_->wait_all(timeout_s_, what + " (rows between nodes)");
  const double t4 = now();
  data_shm_->fence();
  const double t5 = now();
  // Stage 3: my pieces out of my landing region and the inbound staging regions.
  char* out = static_cast<char*>(recv);
  off = 0;
  std::size_t landing = 0;
  for (int s = 0; s < P; ++s) {
    const std::size_t n = static_cast<std::size_t>(recv_bytes[s]);
    const int a = node_of(s);
    if (a == node_) {
      if (n) std::memcpy(out + off, my_region + landing, n);
      landing += n;
    } else if (n) {
      const int la = static_cast<int>(node_ranks_[static_cast<std::size_t>(a)].size());
      std::size_t o = in_off[a];
      for (int q = 0; q < local_; ++q)
        for (int src = 0; src < la; ++src) o += static_cast<std::size_t>(IN(a, src, q));
      for (int src = 0; src < local_of(s); ++src) o += static_cast<std::size_t>(IN(a, src, local_));
      std::memcpy(out + off, data_shm_->region(local_of(in_gw(node_, a))) + o, n);
    }
    off += n;
  }
  times_.stage1 += t2 - t1;
  times_.fences += (t3 - t2) + (t5 - t4);
  times_.network += t4 - t3;
  times_.stage3 += now() - t5;
  return std::make_unique<PendingExchange>();
}

}  // namespace moerun::comm
