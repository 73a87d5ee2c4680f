// MpiAllToAllV against MPI_Alltoallv, bitwise, on the job's ranks: random counts with zeros, one hot
// destination, everything to one rank, an empty exchange, and an M:N pattern (rank 0 sends, the
// others receive) with counts travelling only along its edges.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "base/error.hpp"
#include "comm/alltoallv.hpp"
#include "comm/hierarchical_alltoallv.hpp"
#ifdef MOERUN_HAVE_UCX
#include "comm/ucx_transport.hpp"
#endif

namespace moerun::comm {
namespace {

struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};
const World& world() {
  static const World w;
  return w;
}

// Reference: counts by MPI_Alltoall, payload by MPI_Alltoallv.
std::vector<uint8_t> reference(const std::vector<uint8_t>& send, const std::vector<int64_t>& counts) {
  std::vector<int> sc(world().size), sd(world().size), rc(world().size), rd(world().size);
  for (int p = 0, off = 0; p < world().size; ++p) {
    sc[p] = static_cast<int>(counts[p]);
    sd[p] = off;
    off += sc[p];
  }
  MPI_Alltoall(sc.data(), 1, MPI_INT, rc.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int p = 0; p < world().size; ++p) {
    rd[p] = total;
    total += rc[p];
  }
  std::vector<uint8_t> recv(static_cast<std::size_t>(total));
  MPI_Alltoallv(send.data(), sc.data(), sd.data(), MPI_BYTE, recv.data(), rc.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD);
  return recv;
}

std::vector<uint8_t> ours(AllToAllV& a2a, const std::vector<uint8_t>& send, const std::vector<int64_t>& counts,
                          const ExchangePattern& pattern = {}) {
  auto h = a2a.open(a2a.plan(counts, "test", pattern), 0, send.data());
  h->post();
  h->wait();
  EXPECT_TRUE(h->test());
  const auto* r = h->recv_as<uint8_t>();
  return std::vector<uint8_t>(r, r + h->plan().recv_total());
}

std::vector<uint8_t> payload(const std::vector<int64_t>& counts, uint32_t seed) {
  int64_t n = 0;
  for (auto c : counts) n += c;
  std::mt19937 g(seed);
  std::vector<uint8_t> v(static_cast<std::size_t>(n));
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

std::vector<std::vector<int64_t>> test_cases() {
  std::mt19937 g(static_cast<uint32_t>(world().rank) * 7919u + 1);
  std::vector<std::vector<int64_t>> cases;
  std::vector<int64_t> c(static_cast<std::size_t>(world().size));
  for (auto& x : c) x = static_cast<int64_t>(g() % 3 == 0 ? 0 : g() % 5000);
  cases.push_back(c);  // random with zeros
  cases.push_back(std::vector<int64_t>(world().size, 0));  // empty exchange
  c.assign(static_cast<std::size_t>(world().size), 3);
  c[(world().rank + 1) % world().size] = 1 << 20;  // one hot destination
  cases.push_back(c);
  c.assign(static_cast<std::size_t>(world().size), 0);
  c[0] = 12345;  // everything to rank 0
  cases.push_back(c);
  return cases;
}

void check_all_cases(AllToAllV& a2a) {
  const auto cases = test_cases();
  for (int round = 0; round < 2; ++round)  // twice: the second run reuses grown buffers
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto send = payload(cases[i], static_cast<uint32_t>(world().rank * 100 + i + round));
      EXPECT_EQ(ours(a2a, send, cases[i]), reference(send, cases[i])) << "case " << i;
    }
}

TEST(AllToAllV, MatchesMpiAlltoallv) {
  MpiAllToAllV a2a(MPI_COMM_WORLD, 30);
  check_all_cases(a2a);
}

// Two exchanges in flight together, each in its own slot (a router's micro-batches): each delivers
// its own data, test() turns true by itself once they complete, and a slot's buffers are reused.
TEST(AllToAllV, ExchangesInFlightTogetherKeepTheirSlots) {
  MpiAllToAllV p2p(MPI_COMM_WORLD, 30);
  MpiCollectiveAllToAllV coll(MPI_COMM_WORLD, 30);
  const auto cases = test_cases();
  for (AllToAllV* a2a : {static_cast<AllToAllV*>(&p2p), static_cast<AllToAllV*>(&coll)})
    for (int round = 0; round < 2; ++round) {
      std::vector<std::unique_ptr<ExchangeHandle>> h;
      std::vector<std::vector<uint8_t>> sent;
      for (int slot = 0; slot < 2; ++slot) {
        const auto& counts = cases[static_cast<std::size_t>(slot * 2)];
        sent.push_back(payload(counts, static_cast<uint32_t>(world().rank * 10 + slot + round)));
        h.push_back(a2a->open(a2a->plan(counts, "in flight"), slot));
        std::copy(sent.back().begin(), sent.back().end(), h.back()->send_as<uint8_t>());
        h.back()->post();
      }
      for (auto& x : h)
        while (!x->test()) {}
      for (int slot = 0; slot < 2; ++slot) {
        const auto* r = h[static_cast<std::size_t>(slot)]->recv_as<uint8_t>();
        EXPECT_EQ(std::vector<uint8_t>(r, r + h[static_cast<std::size_t>(slot)]->plan().recv_total()),
                  reference(sent[static_cast<std::size_t>(slot)], cases[static_cast<std::size_t>(slot * 2)]))
            << "slot " << slot << " round " << round;
      }
    }
}

TEST(AllToAllV, HandleMisuseIsAnInternalError) {
  MpiAllToAllV a2a(MPI_COMM_WORLD, 30);
  auto h = a2a.open(a2a.plan(std::vector<int64_t>(static_cast<std::size_t>(world().size), 3), "misuse"));
  EXPECT_THROW(h->test(), Error);  // not posted
  struct Seven {
    char c[7];
  };
  EXPECT_THROW(h->recv_as<Seven>(), Error);  // 3 bytes from each of 3..8 peers are not whole 7-byte records
  h->post();
  EXPECT_THROW(h->post(), Error);  // twice
  h->wait();
  EXPECT_TRUE(h->test());
}

// Between nodes: MPI, or UCX when MOERUN_TEST_TRANSPORT=ucx (ctest runs it with UCX_TLS=tcp,self
// and with UCX_TLS=shm,self).
std::unique_ptr<PointToPoint> transport() {
  const char* t = std::getenv("MOERUN_TEST_TRANSPORT");
  if (t && std::string(t) == "ucx") {
#ifdef MOERUN_HAVE_UCX
    return std::make_unique<UcxPointToPoint>(MPI_COMM_WORLD);
#else
    ADD_FAILURE() << "MOERUN_TEST_TRANSPORT=ucx in a build without UCX";
#endif
  }
  return std::make_unique<MpiPointToPoint>(MPI_COMM_WORLD);
}

// Hierarchical over 1..size virtual nodes (ranks per node 1, 2, 3 and all).
// MOERUN_TEST_RANKS_PER_NODE="1,0" restricts the list (0: nodes from the MPI library), for jobs
// across real hosts where a virtual node must not span two of them.
std::vector<int> ranks_per_node_list() {
  std::vector<int> out;
  if (const char* v = std::getenv("MOERUN_TEST_RANKS_PER_NODE")) {
    std::stringstream ss(v);
    std::string part;
    while (std::getline(ss, part, ',')) out.push_back(std::stoi(part));
    return out;
  }
  return {1, 2, 3, 0};
}

TEST(AllToAllV, HierarchicalMatchesMpiAlltoallv) {
  for (int rpn : ranks_per_node_list()) {
    const Topology topo = build_topology(MPI_COMM_WORLD, 0, rpn);
    HierarchicalAllToAllV a2a(MPI_COMM_WORLD, topo, transport(), 30);
    SCOPED_TRACE(::moerun::str("ranks per node ", rpn));
    check_all_cases(a2a);
  }
}

TEST(AllToAllV, MToNPattern) {
  MpiAllToAllV a2a(MPI_COMM_WORLD, 30);
  const Topology topo = build_topology(MPI_COMM_WORLD, 0, ranks_per_node_list().front());
  HierarchicalAllToAllV hier(MPI_COMM_WORLD, topo, transport(), 30);
  ExchangePattern pat;
  pat.sends_to.assign(static_cast<std::size_t>(world().size), 0);
  pat.receives_from.assign(static_cast<std::size_t>(world().size), 0);
  std::vector<int64_t> counts(static_cast<std::size_t>(world().size), 0);
  for (int p = 1; p < world().size; ++p) {
    pat.sends_to[p] = world().rank == 0;
    if (world().rank == 0) counts[p] = 100 * p;
  }
  if (world().rank != 0) pat.receives_from[0] = 1;
  const auto send = payload(counts, 5);
  EXPECT_EQ(ours(a2a, send, counts, pat), reference(send, counts));
  EXPECT_EQ(ours(hier, send, counts, pat), reference(send, counts));
}

}  // namespace
}  // namespace moerun::comm
