// MPI exchange with timeouts.
#include <exception>
#include "comm/alltoallv.hpp"

#include <chrono>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "base/error.hpp"
#include "comm/backoff.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {
namespace {
constexpr int kCountsTag = 1;
constexpr int kPayloadTag = 2;
}  // namespace

constexpr double kReportGraceS = 5.0;

void wait_with_timeout(std::vector<MPI_Request>& requests, const std::vector<int>& peer_of, double timeout_s, int self,
                       const std::string& what, int recv_count) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  Backoff backoff;
  std::vector<int> indices;
  while (true) {
    // Testsome, not Testall: each finished request becomes MPI_REQUEST_NULL on its own, so a
    // timeout names only the peers still missing, not every peer of the exchange.
    int completed = 0;
    indices.resize(requests.size());
    MPI_CHECK(MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed, indices.data(), MPI_STATUSES_IGNORE));
    if (completed == MPI_UNDEFINED) return;  // no active request left: all done
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    // Rank 0 meets every rank in each step's control reduction, so it notices any stall and ends
    // the job naming the stalled rank. Other ranks give it that long before they speak, so the
    // job says who failed once rather than each waiting rank blaming the one it waits for.
    const double grace = self != 0 ? kReportGraceS : 0.0;
    if (timeout_s > 0 && waited > timeout_s + grace) {
      // Name the peers we still expect data from (pending sends only mirror them).
      std::set<int> missing;
      for (std::size_t i = 0; i < requests.size(); ++i)
        if (requests[i] != MPI_REQUEST_NULL && (recv_count <= 0 || static_cast<int>(i) < recv_count)) missing.insert(peer_of[i]);
      std::ostringstream peers;
      for (int p : missing) peers << (peers.tellp() > 0 ? ", " : "") << p;
      (void)self;
      fail(ErrorKind::Comm, "no progress for ", timeout_s, " s in ", what, "; waiting for rank(s) ",
           missing.empty() ? std::string("?") : peers.str(), " (--comm-timeout)");
    }
    // Spin briefly (exchanges usually complete in microseconds), then yield the core.
    backoff.pause();
  }
}

int64_t ExchangePlan::send_total() const {
  int64_t n = 0;
  for (int64_t b : send_bytes) n += b;
  return n;
}

int64_t ExchangePlan::recv_total() const {
  int64_t n = 0;
  for (int64_t b : recv_bytes) n += b;
  return n;
}

ExchangePlan AllToAllV::plan(std::vector<int64_t> send_bytes, const std::string& what, const ExchangePattern& pattern) {
  if (static_cast<int>(send_bytes.size()) != size())
    fail(ErrorKind::Internal, what, ": ", send_bytes.size(), " send counts for ", size(), " ranks");
  ExchangePlan p;
  p.what = what;
  p.send_bytes = std::move(send_bytes);
  exchange_counts(p.send_bytes, p.recv_bytes, what, pattern);
  return p;
}

ExchangePlan AllToAllV::plan_known(std::vector<int64_t> send_bytes, std::vector<int64_t> recv_bytes, const std::string& what,
                                   const ExchangePattern& pattern) {
  (void)pattern;  // counts travel nowhere, so along no edges
  if (static_cast<int>(recv_bytes.size()) != size() || static_cast<int>(send_bytes.size()) != size())
    fail(ErrorKind::Internal, what, ": ", send_bytes.size(), " send and ", recv_bytes.size(), " receive counts for ", size(), " ranks");
  share_known_counts(send_bytes, recv_bytes, what);
  return {what, std::move(send_bytes), std::move(recv_bytes)};
}

std::unique_ptr<ExchangeHandle> AllToAllV::open(ExchangePlan plan, int slot, const void* send_from) {
  const auto sn = static_cast<std::size_t>(plan.send_total()), rn = static_cast<std::size_t>(plan.recv_total());
  void* send = send_from ? const_cast<void*>(send_from) : lent_send_buffer(sn);
  void* recv = lent_recv_buffer(rn);
  if (!send || !recv) {
    if (slot < 0) fail(ErrorKind::Internal, plan.what, ": exchange slot ", slot);
    if (static_cast<int>(slots_.size()) <= slot) slots_.resize(static_cast<std::size_t>(slot + 1));
    SlotBuffers& b = slots_[static_cast<std::size_t>(slot)];
    if (!send) {
      b.send.resize(sn);
      send = b.send.data();
    }
    if (!recv) {
      b.recv.resize(rn);
      recv = b.recv.data();
    }
  }
  return std::unique_ptr<ExchangeHandle>(new ExchangeHandle(*this, std::move(plan), send, recv));
}

bool AllToAllV::test(PendingExchange& p) {
  int done = 0;
  MPI_CHECK(MPI_Testall(static_cast<int>(p.requests.size()), p.requests.data(), &done, MPI_STATUSES_IGNORE));
  return done != 0;
}

void* ExchangeHandle::checked(void* p, int64_t bytes, std::size_t elem, const char* which) const {
  if (bytes % static_cast<int64_t>(elem) != 0)
    fail(ErrorKind::Internal, plan_.what, ": ", which, " buffer of ", bytes, " bytes is not whole elements of ", elem);
  return p;
}

void ExchangeHandle::post() {
  if (pending_) fail(ErrorKind::Internal, plan_.what, ": posted twice");
  pending_ = a2a_.start(send_, plan_.send_bytes, recv_, plan_.recv_bytes, plan_.what);
}

bool ExchangeHandle::test() {
  if (!pending_) fail(ErrorKind::Internal, plan_.what, ": tested before it was posted");
  if (!done_) done_ = a2a_.test(*pending_);
  return done_;
}

void ExchangeHandle::wait() {
  if (!pending_) fail(ErrorKind::Internal, plan_.what, ": waited for before it was posted");
  if (!done_) a2a_.wait(*pending_);
  done_ = true;
}

MpiAllToAllV::MpiAllToAllV(MPI_Comm comm, double timeout_s) : comm_(OwnedComm::dup(comm)), timeout_s_(timeout_s) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiAllToAllV::exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                                   const ExchangePattern& pattern) {
  auto receives = [&](int p) { return pattern.receives_from.empty() || pattern.receives_from[p]; };
  auto sends = [&](int p) { return pattern.sends_to.empty() || pattern.sends_to[p]; };
  recv.assign(static_cast<std::size_t>(size_), 0);
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  reqs.reserve(static_cast<std::size_t>(2 * size_));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      recv[p] = send[p];
    } else if (receives(p)) {
      reqs.emplace_back();
      peers.push_back(p);
      MPI_CHECK(MPI_Irecv(&recv[p], 1, MPI_INT64_T, p, kCountsTag, comm_, &reqs.back()));
    }
  }
  const int n_recv = static_cast<int>(reqs.size());
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (!sends(p)) {
      if (send[p] != 0) fail(ErrorKind::Internal, what, ": ", send[p], " rows for rank ", p, " outside the exchange pattern");
      continue;
    }
    reqs.emplace_back();
    peers.push_back(p);
    MPI_CHECK(MPI_Isend(&send[p], 1, MPI_INT64_T, p, kCountsTag, comm_, &reqs.back()));
  }
  wait_with_timeout(reqs, peers, timeout_s_, rank_, what + " (counts)", n_recv);
}

std::unique_ptr<PendingExchange> MpiAllToAllV::start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                                     const std::vector<int64_t>& recv_bytes, const std::string& what) {
  auto p = std::make_unique<PendingExchange>();
  p->what = what;
  int64_t off = 0;
  for (int i = 0; i < size_; ++i) {
    if (recv_bytes[i] > std::numeric_limits<int>::max() || send_bytes[i] > std::numeric_limits<int>::max())
      fail(ErrorKind::Comm, what, ": over 2 GiB for one peer; use a smaller --max-batch-tokens");
    if (recv_bytes[i] > 0) {
      p->requests.emplace_back();
      p->peers.push_back(i);
      MPI_CHECK(
          MPI_Irecv(static_cast<char*>(recv) + off, static_cast<int>(recv_bytes[i]), MPI_BYTE, i, kPayloadTag, comm_, &p->requests.back()));
    }
    off += recv_bytes[i];
  }
  p->receives = static_cast<int>(p->requests.size());
  off = 0;
  for (int i = 0; i < size_; ++i) {
    if (send_bytes[i] > 0) {
      p->requests.emplace_back();
      p->peers.push_back(i);
      MPI_CHECK(MPI_Isend(static_cast<const char*>(send) + off, static_cast<int>(send_bytes[i]), MPI_BYTE, i, kPayloadTag, comm_,
                          &p->requests.back()));
    }
    off += send_bytes[i];
  }
  return p;
}

void MpiAllToAllV::wait(PendingExchange& p) {
  wait_with_timeout(p.requests, p.peers, timeout_s_, rank_, p.what, p.receives);
}

MpiCollectiveAllToAllV::MpiCollectiveAllToAllV(MPI_Comm comm, double timeout_s) : comm_(OwnedComm::dup(comm)), timeout_s_(timeout_s) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCollectiveAllToAllV::exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string&,
                                             const ExchangePattern&) {
  recv.assign(static_cast<std::size_t>(size_), 0);
  MPI_CHECK(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv.data(), 1, MPI_INT64_T, comm_));
}

std::unique_ptr<PendingExchange> MpiCollectiveAllToAllV::start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                                               const std::vector<int64_t>& recv_bytes, const std::string& what) {
  sc_.resize(static_cast<std::size_t>(size_));
  sd_.resize(sc_.size());
  rc_.resize(sc_.size());
  rd_.resize(sc_.size());
  int64_t so = 0, ro = 0;
  for (int i = 0; i < size_; ++i) {
    if (so + send_bytes[i] > std::numeric_limits<int>::max() || ro + recv_bytes[i] > std::numeric_limits<int>::max())
      fail(ErrorKind::Comm, what, ": over 2 GiB in one MPI_Alltoallv");
    sc_[i] = static_cast<int>(send_bytes[i]);
    sd_[i] = static_cast<int>(so);
    rc_[i] = static_cast<int>(recv_bytes[i]);
    rd_[i] = static_cast<int>(ro);
    so += send_bytes[i];
    ro += recv_bytes[i];
  }
  auto p = std::make_unique<PendingExchange>();
  p->what = what;
  p->requests.emplace_back();
  p->peers.push_back(-1);
  MPI_CHECK(MPI_Ialltoallv(send, sc_.data(), sd_.data(), MPI_BYTE, recv, rc_.data(), rd_.data(), MPI_BYTE, comm_, &p->requests.back()));
  return p;
}

void MpiCollectiveAllToAllV::wait(PendingExchange& p) {
  wait_with_timeout(p.requests, p.peers, timeout_s_, rank_, p.what + " (MPI_Ialltoallv)");
}

}  // namespace moerun::comm
