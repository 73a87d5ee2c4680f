// MPI point-to-point transport.
#include <exception>
#include "comm/point_to_point.hpp"

#include <limits>

#include "base/error.hpp"
#include "comm/alltoallv.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

MpiPointToPoint::MpiPointToPoint(MPI_Comm world) : comm_(OwnedComm::dup(world)) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
}

namespace {
int mpi_tag(uint64_t tag) {
  return static_cast<int>(tag & 0x7fff);
}  // MPI_TAG_UB is at least 32767
}  // namespace

void MpiPointToPoint::post_send(int peer, const void* buf, std::size_t bytes, uint64_t tag) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) fail(ErrorKind::Comm, "message over 2 GiB to rank ", peer);
  sends_.emplace_back();
  send_peers_.push_back(peer);
  MPI_CHECK(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag(tag), comm_, &sends_.back()));
}

void MpiPointToPoint::post_recv(int peer, void* buf, std::size_t bytes, uint64_t tag) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) fail(ErrorKind::Comm, "message over 2 GiB from rank ", peer);
  recvs_.emplace_back();
  recv_peers_.push_back(peer);
  MPI_CHECK(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag(tag), comm_, &recvs_.back()));
}

MPI_Datatype MpiPointToPoint::segments_type(const std::vector<Segment>& segments) {
  // Absolute addresses from MPI_BOTTOM: one derived datatype describes the whole gather/scatter.
  std::vector<int> lens;
  std::vector<MPI_Aint> addrs;
  for (const Segment& sg : segments) {
    if (sg.bytes == 0) continue;
    if (sg.bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) fail(ErrorKind::Comm, "segment over 2 GiB");
    lens.push_back(static_cast<int>(sg.bytes));
    MPI_Aint a;
    MPI_CHECK(MPI_Get_address(sg.data, &a));
    addrs.push_back(a);
  }
  MPI_Datatype t;
  MPI_CHECK(MPI_Type_create_hindexed(static_cast<int>(lens.size()), lens.data(), addrs.data(), MPI_BYTE, &t));
  MPI_CHECK(MPI_Type_commit(&t));
  types_.push_back(t);
  return t;
}

void MpiPointToPoint::post_send_segments(int peer, std::vector<Segment> segments, uint64_t tag) {
  MPI_Datatype t = segments_type(segments);
  sends_.emplace_back();
  send_peers_.push_back(peer);
  MPI_CHECK(MPI_Isend(MPI_BOTTOM, 1, t, peer, mpi_tag(tag), comm_, &sends_.back()));
}

void MpiPointToPoint::post_recv_segments(int peer, std::vector<Segment> segments, uint64_t tag) {
  MPI_Datatype t = segments_type(segments);
  recvs_.emplace_back();
  recv_peers_.push_back(peer);
  MPI_CHECK(MPI_Irecv(MPI_BOTTOM, 1, t, peer, mpi_tag(tag), comm_, &recvs_.back()));
}

void MpiPointToPoint::wait_all(double timeout_s, const std::string& what) {
  std::vector<MPI_Request> all(recvs_);
  all.insert(all.end(), sends_.begin(), sends_.end());
  std::vector<int> peers(recv_peers_);
  peers.insert(peers.end(), send_peers_.begin(), send_peers_.end());
  const int n_recv = static_cast<int>(recvs_.size());
  recvs_.clear();
  sends_.clear();
  recv_peers_.clear();
  send_peers_.clear();
  wait_with_timeout(all, peers, timeout_s, rank_, what, n_recv);
  for (MPI_Datatype& t : types_) MPI_Type_free(&t);
  types_.clear();
}

}  // namespace moerun::comm
