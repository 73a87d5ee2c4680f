// Placement: round-robin dealing, and the placement file's bad cases (unplaced expert, router rank
// as owner, bad JSON), each naming the file and entry.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "experts/placement.hpp"

namespace moerun::experts {
namespace {

// 4 ranks on one node, 1 router: experts on ranks 1, 2, 3. 2 layers x 4 experts.
const comm::Topology kTopo = comm::topology_from_nodes({0, 0, 0, 0}, 1);

std::string write(const std::string& text) {
  const std::string p = (std::filesystem::temp_directory_path() / ("moerun-placement-" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(p) << text;
  return p;
}

std::string error_of(const std::string& text) {
  try {
    placement_from_json(write(text), 2, 4, kTopo);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  return "no error";
}

TEST(Placement, RoundRobinDealsOverExpertRanks) {
  Placement p = round_robin_placement(2, 4, kTopo);
  EXPECT_EQ(p.owner, (std::vector<int>{1, 2, 3, 1, 2, 3, 1, 2}));
  EXPECT_EQ(p.count_on(1), 3);
  EXPECT_EQ(p.count_on(0), 0);
}

TEST(Placement, ExplicitFile) {
  Placement p = placement_from_json(write(R"({"0": {"0": 1, "1": 1, "2": 1, "3": 2}, "1": {"0": 3, "1": 3, "2": 3, "3": 3}})"), 2, 4, kTopo);
  EXPECT_EQ(p.owner_of(0, 3), 2);
  EXPECT_EQ(p.count_on(3), 4);
}

TEST(Placement, BadFiles) {
  EXPECT_NE(error_of(R"({"0": {"0": 1, "1": 1, "2": 1, "3": 2}, "1": {"0": 3, "1": 3, "2": 3}})").find("layer 1 expert 3 is not placed"), std::string::npos);
  EXPECT_NE(error_of(R"({"0": {"0": 0}})").find("rank 0 is not an expert rank"), std::string::npos);
  EXPECT_NE(error_of(R"({"0": {"0": 1)").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"2": {"0": 1}})").find("layer \"2\" is not in [0, 2)"), std::string::npos);
  EXPECT_NE(error_of(R"({"0": {"9": 1}})").find("expert \"9\" is not in [0, 4)"), std::string::npos);
}

}  // namespace
}  // namespace moerun::experts
