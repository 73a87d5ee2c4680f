// AllToAllV: the exchange of DESIGN §4 — counts first, then payload — among all ranks of a
// communicator (router and expert ranks alike; a rank with nothing to send sends zero counts). An
// exchange is plan -> handle -> post -> test/wait:
//   ExchangePlan plan = a2a.plan(send_bytes, "dispatch of layer 3", pattern);  // the counts exchange
//   auto h = a2a.open(std::move(plan), slot);  // host buffers of the plan's sizes
//   fill h->send_as<T>(); h->post(); ... h->test() / h->wait(); read h->recv_as<T>().
// Every rank plans the exchanges of one AllToAllV in the same order. Posted exchanges may stay in
// flight (routers overlap them with compute); a handle's buffers are the transport's memory where
// it lends some (hier: the node's shared window, no copy in or out) or the slot's own buffers
// (kept per slot, so exchanges in flight together use different slots).
// MpiAllToAllV moves counts and payload point-to-point (MPI_Isend/Irecv along the edges that carry
// data), which is what MPI_Alltoallv does inside but lets a stalled peer be named when
// --comm-timeout expires and sends no empty messages in M:N router->expert traffic; tests check it
// against MPI_Alltoallv.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "base/aligned_buffer.hpp"
#include "base/error.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

// An exchange in flight: its requests (receives first) and their peers, until wait().
struct PendingExchange {
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  int receives = 0;
  std::string what;
};

// Who talks to whom in an exchange (M:N patterns): counts travel only along these edges, and a
// peer outside them has count 0 by contract. Empty vectors mean "everyone".
struct ExchangePattern {
  std::vector<uint8_t> sends_to;  // [peer] this rank may send rows to peer
  std::vector<uint8_t> receives_from;  // [peer] peer may send rows to this rank
};

// What one exchange moves: bytes to and from each peer, contiguous in peer order.
struct ExchangePlan {
  std::string what;  // names the exchange in errors
  std::vector<int64_t> send_bytes;  // [peer]
  std::vector<int64_t> recv_bytes;  // [peer], from the counts exchange
  int64_t send_total() const;
  int64_t recv_total() const;
};

class AllToAllV;

// One planned exchange and its buffers. Fill the send buffer, post(), then test() or wait(); the
// receive buffer holds the data once complete and stays valid until the transport's next plan().
// A posted exchange must complete before its handle goes away (a failing job aborts instead).
class ExchangeHandle {
 public:
  const ExchangePlan& plan() const { return plan_; }
  template <typename T>
  T* send_as() {
    return static_cast<T*>(checked(send_, plan_.send_total(), sizeof(T), "send"));
  }
  template <typename T>
  const T* recv_as() const {
    return static_cast<const T*>(checked(recv_, plan_.recv_total(), sizeof(T), "receive"));
  }
  void post();
  bool test();  // true once the posted exchange completed
  void wait();

 private:
  friend class AllToAllV;
  ExchangeHandle(AllToAllV& a2a, ExchangePlan plan, void* send, void* recv) : a2a_(a2a), plan_(std::move(plan)), send_(send), recv_(recv) {}
  void* checked(void* p, int64_t bytes, std::size_t elem, const char* which) const;

  AllToAllV& a2a_;
  ExchangePlan plan_;
  void* send_;
  void* recv_;
  std::unique_ptr<PendingExchange> pending_;
  bool done_ = false;
};

class AllToAllV {
 public:
  virtual ~AllToAllV() = default;
  virtual int size() const = 0;

  // The counts exchange: every peer learns what this rank sends it, this rank what each sends it.
  ExchangePlan plan(std::vector<int64_t> send_bytes, const std::string& what, const ExchangePattern& pattern = {});
  // An exchange whose counts both sides know already (a reply to an earlier exchange, as the MoE
  // combine answers the dispatch): no counts exchange between ranks. A transport that lays out a
  // node's shared memory from the node's counts (hier) shares them inside the node, and a node
  // peer whose count differs from `recv_bytes` is a Comm error naming it.
  ExchangePlan plan_known(std::vector<int64_t> send_bytes, std::vector<int64_t> recv_bytes, const std::string& what,
                          const ExchangePattern& pattern = {});
  // Buffers for a planned exchange. `slot`: exchanges in flight at the same time use different
  // slots (a slot's own buffers are reused by its next exchange). `send_from`: send from the
  // caller's memory instead (kept unchanged until the exchange completes).
  std::unique_ptr<ExchangeHandle> open(ExchangePlan plan, int slot = 0, const void* send_from = nullptr);

 protected:
  friend class ExchangeHandle;
  // The transport: recv[p] = the count peer p sent to us; `what` names the exchange in timeout errors.
  virtual void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                               const ExchangePattern& pattern) = 0;
  // Starts moving send_bytes[p] bytes to each peer p (contiguous, peer order) and recv_bytes[p] from it.
  virtual std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                                 const std::vector<int64_t>& recv_bytes, const std::string& what) = 0;
  virtual void wait(PendingExchange& pending) = 0;
  // What a transport needs of counts every rank knows before start() (plan_known); nothing for
  // point-to-point transports.
  virtual void share_known_counts(const std::vector<int64_t>& send, const std::vector<int64_t>& recv, const std::string& what) {
    (void)send, (void)recv, (void)what;
  }
  // Whether the pending requests completed (a transport that completes in start() has none).
  bool test(PendingExchange& pending);
  // Memory the transport lends for the next exchange's data (after its counts; valid until the next
  // one), or null: memory it shares (hier: the node's window) saves a copy in and out.
  virtual void* lent_send_buffer(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void* lent_recv_buffer(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }

 private:
  struct SlotBuffers {
    AlignedBuffer send, recv;
  };
  std::vector<SlotBuffers> slots_;
};

class MpiAllToAllV final : public AllToAllV {
 public:
  // Duplicates `comm` (its traffic cannot mix with anyone else's). timeout_s <= 0: wait forever.
  MpiAllToAllV(MPI_Comm comm, double timeout_s);
  int size() const override { return size_; }

 protected:
  void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                       const ExchangePattern& pattern) override;
  std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                         const std::vector<int64_t>& recv_bytes, const std::string& what) override;
  void wait(PendingExchange& pending) override;

 private:
  OwnedComm comm_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
};

// The MPI library's own MPI_Alltoall (counts) + MPI_Ialltoallv (payload): the reference in tests
// and the baseline row of `bench a2a`. A stalled peer cannot be named (collective).
class MpiCollectiveAllToAllV final : public AllToAllV {
 public:
  MpiCollectiveAllToAllV(MPI_Comm comm, double timeout_s);
  int size() const override { return size_; }

 protected:
  void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                       const ExchangePattern& pattern) override;
  std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                         const std::vector<int64_t>& recv_bytes, const std::string& what) override;
  void wait(PendingExchange& pending) override;

 private:
  OwnedComm comm_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  std::vector<int> sc_, sd_, rc_, rd_;
};

// Waits for `requests` (MPI_Waitall semantics) polling with a deadline; on timeout throws
// ErrorKind::Comm naming `what` and the peers of the still open receives: requests[0, recv_count)
// are receives (recv_count <= 0: name the peers of all open requests), peer_of[i] the peer of request i.
void wait_with_timeout(std::vector<MPI_Request>& requests, const std::vector<int>& peer_of, double timeout_s, int self_rank,
                       const std::string& what, int recv_count = -1);

}  // namespace moerun::comm
