// UCX transport. UCS_CHECK turns a ucs_status_t into moerun::Error(Comm) with the call and UCX's
// message; contexts, workers, endpoints and memory maps are owned here and released in reverse order.
#include "comm/ucx_transport.hpp"

#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "base/error.hpp"
#include "base/log.hpp"
#include "comm/backoff.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {
namespace {

#define UCS_CHECK(expr)                                                                                                                 \
  do {                                                                                                                                  \
    ucs_status_t moerun_ucs_ = (expr);                                                                                                  \
    if (moerun_ucs_ != UCS_OK)                                                                                                          \
      throw ::moerun::Error(::moerun::ErrorKind::Comm, ::moerun::str("UCX: ", #expr, " failed: ", ucs_status_string(moerun_ucs_), " (", \
                                                                     __FILE__, ":", __LINE__, ")"));                                    \
  } while (0)

constexpr int kSenderShift = 44;
uint64_t full_tag(int sender, uint64_t tag) {
  return (static_cast<uint64_t>(sender) << kSenderShift) | (tag & ((uint64_t{1} << kSenderShift) - 1));
}

struct Pending {
  void* request = nullptr;  // UCX request, or nullptr when it completed immediately
  int peer = -1;
  bool recv = false;
  std::shared_ptr<std::vector<ucp_dt_iov_t>> iov;  // kept alive until completion
};

struct EpErrorArg;

}  // namespace

struct UcxPointToPoint::Impl {
  int rank = 0, size = 1;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<std::vector<char>> addresses;  // [peer] worker address
  std::vector<ucp_ep_h> eps;
  std::vector<std::unique_ptr<std::pair<Impl*, int>>> ep_args;
  std::set<int> failed_peers;
  ucs_status_t failure = UCS_OK;
  ucp_mem_h pool = nullptr;
  char* pool_base = nullptr;
  std::size_t pool_bytes = 0;
  std::vector<Pending> pending;
  bool warned_no_peer_errors = false;
  // Error mode PEER for peers on other hosts. Peers on this host (virtual nodes) are made without
  // it so that UCX may use shared memory/CMA (its shm transports cannot detect peer failure; a dead
  // local peer ends the job through mpirun, or --comm-timeout). peer_errors 0 drops PEER
  // everywhere, 1 keeps it everywhere (MOERUN_UCX_PEER_ERRORS).
  int peer_errors = -1;
  std::vector<uint8_t> same_host;  // [peer]
  bool peer_errors_for(int peer) const {
    if (peer_errors == 0) return false;
    if (peer_errors == 1) return true;
    return !same_host[static_cast<std::size_t>(peer)];
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* a = static_cast<std::pair<Impl*, int>*>(arg);
    a->first->failed_peers.insert(a->second);
    a->first->failure = status;
  }

  ucp_ep_h endpoint(int peer) {
    if (eps[peer]) return eps[peer];
    ep_args.push_back(std::make_unique<std::pair<Impl*, int>>(this, peer));
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(addresses[peer].data());
    p.err_mode = peer_errors_for(peer) ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    p.err_handler.cb = &Impl::on_ep_error;
    p.err_handler.arg = ep_args.back().get();
    ucs_status_t st = ucp_ep_create(worker, &p, &eps[peer]);
    if (st == UCS_ERR_UNREACHABLE) {
      // Shared-memory transports (UCX_TLS=shm) cannot detect peer failure; such an endpoint is made
      // without it, and a dead peer is then caught by --comm-timeout instead.
      p.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      st = ucp_ep_create(worker, &p, &eps[peer]);
      if (st == UCS_OK && !warned_no_peer_errors) {
        log::debug("UCX endpoint to rank ", peer, " has no peer-failure detection (transport without it)");
        warned_no_peer_errors = true;
      }
    }
    UCS_CHECK(st);
    return eps[peer];
  }

  ucp_request_param_t params(const void* buf, std::size_t bytes) const {
    ucp_request_param_t p{};
    p.op_attr_mask = 0;
    const char* b = static_cast<const char*>(buf);
    if (pool && b >= pool_base && b + bytes <= pool_base + pool_bytes) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = pool;
    }
    return p;
  }

  void track(ucs_status_ptr_t r, int peer, bool recv, const char* op, std::shared_ptr<std::vector<ucp_dt_iov_t>> iov = nullptr) {
    if (UCS_PTR_IS_ERR(r)) fail(ErrorKind::Comm, "UCX: ", op, " with rank ", peer, " failed: ", ucs_status_string(UCS_PTR_STATUS(r)));
    pending.push_back({UCS_PTR_IS_PTR(r) ? r : nullptr, peer, recv, std::move(iov)});
  }

  static std::shared_ptr<std::vector<ucp_dt_iov_t>> iov_of(const std::vector<Segment>& segments) {
    auto v = std::make_shared<std::vector<ucp_dt_iov_t>>();
    for (const Segment& sg : segments)
      if (sg.bytes) v->push_back({sg.data, sg.bytes});
    return v;
  }

  static ucp_request_param_t iov_params() {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = ucp_dt_make_iov();
    return p;
  }

  void unmap_pool() {
    if (pool) ucp_mem_unmap(context, pool);
    pool = nullptr;
  }
};

bool ucx_available() {
  return true;
}

UcxPointToPoint::UcxPointToPoint(MPI_Comm world, int peer_errors) : impl_(std::make_unique<Impl>()) {
  impl_->peer_errors = peer_errors;
  Impl& s = *impl_;
  MPI_CHECK(MPI_Comm_rank(world, &s.rank));
  MPI_CHECK(MPI_Comm_size(world, &s.size));
  // moerun reports every UCX failure itself (with the peer); UCX's own log would repeat it, and
  // logs an ERROR for each endpoint probe on transports without peer-failure detection.
  if (!std::getenv("UCX_LOG_LEVEL")) ucs_global_opts_set_value("LOG_LEVEL", "fatal");
  ucp_config_t* config = nullptr;
  UCS_CHECK(ucp_config_read(nullptr, nullptr, &config));
  ucp_params_t cp{};
  cp.field_mask = UCP_PARAM_FIELD_FEATURES;
  cp.features = UCP_FEATURE_TAG;
  const ucs_status_t st = ucp_init(&cp, config, &s.context);
  ucp_config_release(config);
  UCS_CHECK(st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  UCS_CHECK(ucp_worker_create(s.context, &wp, &s.worker));
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  UCS_CHECK(ucp_worker_get_address(s.worker, &addr, &len));
  // Worker addresses over MPI: lengths, then the bytes.
  int mylen = static_cast<int>(len);
  std::vector<int> lens(static_cast<std::size_t>(s.size)), displs(lens.size());
  MPI_CHECK(MPI_Allgather(&mylen, 1, MPI_INT, lens.data(), 1, MPI_INT, world));
  int total = 0;
  for (int p = 0; p < s.size; ++p) {
    displs[p] = total;
    total += lens[p];
  }
  std::vector<char> all(static_cast<std::size_t>(total));
  MPI_CHECK(MPI_Allgatherv(addr, mylen, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, world));
  ucp_worker_release_address(s.worker, addr);
  s.addresses.resize(static_cast<std::size_t>(s.size));
  for (int p = 0; p < s.size; ++p) s.addresses[p].assign(all.begin() + displs[p], all.begin() + displs[p] + lens[p]);
  s.eps.assign(static_cast<std::size_t>(s.size), nullptr);
  // Which peers share this host: host id = lowest world rank of our shared-memory communicator.
  MPI_Comm host;
  MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &host));
  int host_id = s.rank;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &host_id, 1, MPI_INT, MPI_MIN, host));
  MPI_CHECK(MPI_Comm_free(&host));
  std::vector<int> hosts(static_cast<std::size_t>(s.size));
  MPI_CHECK(MPI_Allgather(&host_id, 1, MPI_INT, hosts.data(), 1, MPI_INT, world));
  s.same_host.resize(hosts.size());
  for (int p = 0; p < s.size; ++p) s.same_host[p] = hosts[p] == host_id;
}

UcxPointToPoint::~UcxPointToPoint() {
  Impl& s = *impl_;
  for (Pending& p : s.pending)
    if (p.request) {
      ucp_request_cancel(s.worker, p.request);
      ucp_request_free(p.request);
    }
  for (ucp_ep_h ep : s.eps) {
    if (!ep) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(s.worker);
      ucp_request_free(r);
    }
  }
  s.unmap_pool();
  if (s.worker) ucp_worker_destroy(s.worker);
  if (s.context) ucp_cleanup(s.context);
}

void UcxPointToPoint::set_pool(void* base, std::size_t bytes) {
  Impl& s = *impl_;
  s.unmap_pool();
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = bytes;
  UCS_CHECK(ucp_mem_map(s.context, &mp, &s.pool));
  s.pool_base = static_cast<char*>(base);
  s.pool_bytes = bytes;
}

void UcxPointToPoint::post_send(int peer, const void* buf, std::size_t bytes, uint64_t tag) {
  Impl& s = *impl_;
  ucp_request_param_t p = s.params(buf, bytes);
  s.track(ucp_tag_send_nbx(s.endpoint(peer), buf, bytes, full_tag(s.rank, tag), &p), peer, false, "send");
}

void UcxPointToPoint::post_recv(int peer, void* buf, std::size_t bytes, uint64_t tag) {
  Impl& s = *impl_;
  s.endpoint(peer);  // so that a failure of this peer is reported to us
  ucp_request_param_t p = s.params(buf, bytes);
  s.track(ucp_tag_recv_nbx(s.worker, buf, bytes, full_tag(peer, tag), ~uint64_t{0}, &p), peer, true, "receive");
}

void UcxPointToPoint::post_send_segments(int peer, std::vector<Segment> segments, uint64_t tag) {
  Impl& s = *impl_;
  auto iov = Impl::iov_of(segments);
  ucp_request_param_t p = Impl::iov_params();
  s.track(ucp_tag_send_nbx(s.endpoint(peer), iov->data(), iov->size(), full_tag(s.rank, tag), &p), peer, false, "send", iov);
}

void UcxPointToPoint::post_recv_segments(int peer, std::vector<Segment> segments, uint64_t tag) {
  Impl& s = *impl_;
  s.endpoint(peer);
  auto iov = Impl::iov_of(segments);
  ucp_request_param_t p = Impl::iov_params();
  s.track(ucp_tag_recv_nbx(s.worker, iov->data(), iov->size(), full_tag(peer, tag), ~uint64_t{0}, &p), peer, true, "receive", iov);
}

void UcxPointToPoint::wait_all(double timeout_s, const std::string& what) {
  Impl& s = *impl_;
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  while (true) {
    bool busy = false;
    for (Pending& p : s.pending) {
      if (!p.request) continue;
      const ucs_status_t st = ucp_request_check_status(p.request);
      if (st == UCS_INPROGRESS) {
        busy = true;
        continue;
      }
      ucp_request_free(p.request);
      p.request = nullptr;
      if (st != UCS_OK)
        fail(ErrorKind::Comm, what, ": UCX ", p.recv ? "receive from" : "send to", " rank ", p.peer, " failed: ", ucs_status_string(st));
    }
    for (const Pending& p : s.pending)
      if (p.request && s.failed_peers.count(p.peer))
        fail(ErrorKind::Comm, what, ": rank ", p.peer, " is unreachable (UCX: ", ucs_status_string(s.failure), ")");
    if (!busy) break;
    if (ucp_worker_progress(s.worker) == 0)
      backoff.pause();
    else
      backoff.reset();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      std::set<int> missing;
      for (const Pending& p : s.pending)
        if (p.request && p.recv) missing.insert(p.peer);
      std::ostringstream os;
      for (int m : missing) os << (os.tellp() > 0 ? ", " : "") << m;
      fail(ErrorKind::Comm, "no progress for ", timeout_s, " s in ", what, "; waiting for rank(s) ",
           missing.empty() ? std::string("?") : os.str(), " (--comm-timeout)");
    }
  }
  s.pending.clear();
}

std::string UcxPointToPoint::describe() const {
  return "ucx";
}

}  // namespace moerun::comm
