// AllToAllV: the exchange of DESIGN §4 — counts first, then payload — among all ranks of a
// communicator (router and expert ranks alike; a rank with nothing to send sends zero counts).
// MpiAllToAllV moves counts and payload point-to-point (MPI_Isend/Irecv along the edges that carry
// data), which is what MPI_Alltoallv does inside but lets a stalled peer be named when
// --comm-timeout expires and sends no empty messages in M:N router->expert traffic; tests check it
// against MPI_Alltoallv. Exchanges can be left in flight (start/wait) so routers overlap them with
// compute.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

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
  std::vector<uint8_t> sends_to;       // [peer] this rank may send rows to peer
  std::vector<uint8_t> receives_from;  // [peer] peer may send rows to this rank
};

class AllToAllV {
 public:
  virtual ~AllToAllV() = default;
  // recv[p] = the count peer p sent to us. `what` names the exchange in timeout errors.
  virtual void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                               const ExchangePattern& pattern = {}) = 0;
  // Starts moving send_bytes[p] bytes to each peer p (contiguous, peer order) and recv_bytes[p] from it.
  virtual std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                                 const std::vector<int64_t>& recv_bytes, const std::string& what) = 0;
  virtual void wait(PendingExchange& pending) = 0;
  virtual int size() const = 0;

  // Memory for the next exchange's data (call after exchange_counts; valid until the next one). A
  // transport may hand out memory it shares (hier: the node's window), which saves a copy: data
  // received there needs no copy out, data sent from there no copy in. A send buffer must not be
  // reused before its exchange completed.
  virtual void* send_buffer(std::size_t bytes) {
    own_send_.resize(bytes);
    return own_send_.data();
  }
  virtual void* recv_buffer(std::size_t bytes) {
    own_recv_.resize(bytes);
    return own_recv_.data();
  }

 private:
  std::vector<char> own_send_, own_recv_;
};

class MpiAllToAllV final : public AllToAllV {
 public:
  // Duplicates `comm` (its traffic cannot mix with anyone else's). timeout_s <= 0: wait forever.
  MpiAllToAllV(MPI_Comm comm, double timeout_s);
  void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                       const ExchangePattern& pattern = {}) override;
  std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                         const std::vector<int64_t>& recv_bytes, const std::string& what) override;
  void wait(PendingExchange& pending) override;
  int size() const override { return size_; }

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
  void exchange_counts(const std::vector<int64_t>& send, std::vector<int64_t>& recv, const std::string& what,
                       const ExchangePattern& pattern = {}) override;
  std::unique_ptr<PendingExchange> start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                         const std::vector<int64_t>& recv_bytes, const std::string& what) override;
  void wait(PendingExchange& pending) override;
  int size() const override { return size_; }

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
void wait_with_timeout(std::vector<MPI_Request>& requests, const std::vector<int>& peer_of, double timeout_s,
                       int self_rank, const std::string& what, int recv_count = -1);

}  // namespace moerun::comm
