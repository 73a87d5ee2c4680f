// The expert index of a local model, kept next to its shards (issue 41, start-up): where every
// expert's chunks lie in its shard, its xxh64 and each shard's identity, as ExpertShardIndex::build
// found them by walking the shards with HDF5 (about a third of a page-cached start on the bench
// shape, with the HDF5 probe's walk of the same files). `experts-index.bin` is tied to the size,
// modification time, inode and device of model.h5 and of every shard: while none of them changed,
// a start reads it instead of walking, and the probe walks model.h5 alone (libhdf5 never opens the
// shards: they are read by pread at the recorded offsets, every expert checked against its xxh64).
// It is a cache: a missing, damaged or stale file is rebuilt, never an error. Layout in docs/FORMATS.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/expert_shards.hpp"

namespace moerun::io {

struct ExpertIndex {
  std::vector<ExpertLocation> locations;  // [layer * num_experts + expert]; shard holds the file name only
  std::vector<uint64_t> identities;  // per shard, in shard order
};

// "experts-index.bin" in the model directory.
std::string expert_index_cache_path(const std::string& model_dir);

// Whether the cache of `model_dir` matches model.h5 and the shards `shard_files` as they are now.
bool expert_index_cache_current(const std::string& model_dir, const std::vector<std::string>& shard_files);

// The index, when the cache is current and intact and its shape is `experts` slots of `parts` parts.
std::optional<ExpertIndex> read_expert_index_cache(const std::string& model_dir, const std::vector<std::string>& shard_files,
                                                   int64_t experts, std::size_t parts);

// Writes the index (all experts in raw chunks), atomically; false (after one debug line) when the
// directory is not writable or a file changed meanwhile.
bool write_expert_index_cache(const std::string& model_dir, const std::vector<std::string>& shard_files, const ExpertIndex& index,
                              std::size_t parts);

}  // namespace moerun::io
