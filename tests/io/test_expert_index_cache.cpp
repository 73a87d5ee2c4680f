// The expert index kept next to a local model (experts-index.bin, issue 41): the first build walks
// the shards and keeps it, the next build reads it and finds every expert where the walk did, with
// the same checksums and shard identities; a shard rewritten (its modification time), model.h5
// replaced, a changed byte or a foreign file make it stale (walked again, then kept anew), and the
// expert reads through a kept index verify as before: an index whose checksum holds but whose
// offsets are wrong gives an error naming the shard and the expert, never another expert's weights.
#include <gtest/gtest.h>

#include "tests/test_support.hpp"

#include <filesystem>
#include <cstring>
#include <fstream>

#include "base/error.hpp"
#include "base/xxh64.hpp"
#include "io/expert_index_cache.hpp"
#include "io/expert_shards.hpp"
#include "io/model_file.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class ExpertIndexCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = moerun::testing::scratch_dir("xindex").string();
    convert::write_synthetic_model(dir, moerun::testing::tiny_synth_config(2), true);
    config = read_model_config(ModelLocation(dir));
  }
  void TearDown() override { fs::remove_all(dir); }
  std::vector<std::string> shards() const { return ModelLocation(dir).shard_names(); }
  bool current() const { return expert_index_cache_current(dir, shards()); }
  // experts-index.bin as written now, and the bytes to write in its place.
  std::string index_bytes() const {
    std::ifstream in(expert_index_cache_path(dir), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write_index(const std::string& b) const { std::ofstream(expert_index_cache_path(dir), std::ios::binary | std::ios::trunc) << b; }
  std::string dir;
  model::ModelConfig config;
};

void expect_same(const ExpertShardIndex& a, const ExpertShardIndex& b, const model::ModelConfig& c) {
  EXPECT_EQ(a.shard_identities(), b.shard_identities());
  for (int64_t l = 0; l < c.num_moe_layers(); ++l)
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const ExpertLocation &x = a.locate(l, e), &y = b.locate(l, e);
      EXPECT_EQ(x.shard, y.shard);
      EXPECT_EQ(x.xxh64, y.xxh64);
      EXPECT_TRUE(y.raw_chunks);
      for (int m = 0; m < kMaxExpertParts; ++m) EXPECT_EQ(x.offset[m], y.offset[m]) << l << "/" << e << " part " << m;
    }
}

TEST_F(ExpertIndexCacheTest, KeptByTheFirstBuildAndReadByTheNext) {
  EXPECT_FALSE(current());
  const ExpertShardIndex walked = ExpertShardIndex::build(ModelLocation(dir), config);
  ASSERT_TRUE(fs::exists(expert_index_cache_path(dir)));
  EXPECT_TRUE(current());
  const auto kept = read_expert_index_cache(dir, shards(), config.num_expert_slots(), expert_raw_parts(config).size());
  ASSERT_TRUE(kept.has_value());
  const ExpertShardIndex again = ExpertShardIndex::build(ModelLocation(dir), config);
  expect_same(walked, again, config);
  for (int64_t e = 0; e < config.num_experts; ++e) {
    const AlignedBuffer a = walked.load_raw(1, e), b = again.load_raw(1, e);  // verified reads
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size()));
  }
}

TEST_F(ExpertIndexCacheTest, AShardRewrittenOrModelReplacedMakesItStale) {
  ExpertShardIndex::build(ModelLocation(dir), config);
  ASSERT_TRUE(current());
  const fs::path shard = fs::path(dir) / shards().front();
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  EXPECT_FALSE(current());
  EXPECT_FALSE(read_expert_index_cache(dir, shards(), config.num_expert_slots(), expert_raw_parts(config).size()).has_value());
  ExpertShardIndex::build(ModelLocation(dir), config);  // walks, keeps it anew
  EXPECT_TRUE(current());
  // model.h5 replaced by a copy of itself: another inode.
  fs::copy_file(fs::path(dir) / "model.h5", fs::path(dir) / "copy.h5");
  fs::rename(fs::path(dir) / "copy.h5", fs::path(dir) / "model.h5");
  EXPECT_FALSE(current());
}

TEST_F(ExpertIndexCacheTest, ADamagedOrForeignFileIsNotUsed) {
  ExpertShardIndex::build(ModelLocation(dir), config);
  const std::string bytes = index_bytes();
  auto write = [&](const std::string& b) { write_index(b); };
  std::string flipped = bytes;
  flipped[flipped.size() - 20] ^= 1;  // a record's byte: the trailing checksum no longer matches
  write(flipped);
  EXPECT_FALSE(current());
  EXPECT_FALSE(read_expert_index_cache(dir, shards(), config.num_expert_slots(), expert_raw_parts(config).size()).has_value());
  write("MOERUNDQ not an index at all, long enough to be read");
  EXPECT_FALSE(current());
  write(bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(current());
  // Another shape than the caller's: not used either.
  write(bytes);
  EXPECT_TRUE(current());
  EXPECT_FALSE(read_expert_index_cache(dir, shards(), config.num_expert_slots() + 1, expert_raw_parts(config).size()).has_value());
  // And a build after damage still finds every expert (it walks).
  write(flipped);
  const ExpertShardIndex walked = ExpertShardIndex::build(ModelLocation(dir), config);
  EXPECT_NO_THROW(walked.load_raw(0, 0));
}

// Records are found from the layout in docs/FORMATS.md: magic, header length, JSON header, N records of
// 16 + 8P bytes, then the xxh64 of everything before it. Expert 0's and expert 1's offsets are
// swapped (their checksums kept) and the trailing checksum made to hold again.
TEST_F(ExpertIndexCacheTest, WrongOffsetsWithAValidChecksumFailTheExpertsCheck) {
  ExpertShardIndex::build(ModelLocation(dir), config);
  std::string b = index_bytes();
  uint64_t header = 0;
  std::memcpy(&header, b.data() + 8, 8);
  const std::size_t parts = expert_raw_parts(config).size(), record = 16 + 8 * parts, first = 16 + header;
  ASSERT_EQ(b.size(), first + record * static_cast<std::size_t>(config.num_expert_slots()) + 8);
  for (std::size_t m = 0; m < parts; ++m)
    std::swap_ranges(b.begin() + static_cast<std::ptrdiff_t>(first + 16 + 8 * m),
                     b.begin() + static_cast<std::ptrdiff_t>(first + 24 + 8 * m),
                     b.begin() + static_cast<std::ptrdiff_t>(first + record + 16 + 8 * m));
  const uint64_t sum = Xxh64().bytes(b.data(), b.size() - 8).digest();
  std::memcpy(b.data() + b.size() - 8, &sum, 8);
  write_index(b);
  ASSERT_TRUE(current());  // the forged file passes every check of its own
  const ExpertShardIndex index = ExpertShardIndex::build(ModelLocation(dir), config);
  try {
    index.load_raw(0, 0);
    FAIL() << "expert 0 read at expert 1's offsets was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << m;
    EXPECT_NE(m.find("experts-0000"), std::string::npos) << m;
    EXPECT_NE(m.find("/layers/0/experts/0"), std::string::npos) << m;
    EXPECT_NE(m.find("checksum"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace moerun::io
