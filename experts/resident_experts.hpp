// ResidentExperts: the experts a rank owns, all loaded into host memory at start (checksums
// verified). The tiered cache (L1/L2/L3) replaces this when experts no longer fit.
#pragma once
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/matmul.hpp"

#include "experts/expert_packing.hpp"
#include "experts/expert_store.hpp"
#include "io/expert_shards.hpp"

namespace moerun::experts {

class ResidentExperts : public ExpertStore {
 public:
  explicit ResidentExperts(int64_t num_experts) : num_experts_(num_experts) {}
  // Loads every (layer, expert) for which `owns` is true and packs it for `mm` (see Matmul::pack).
  ResidentExperts(const io::ExpertShardIndex& index, const io::ModelConfig& config,
                  const std::function<bool(int64_t, int64_t)>& owns, Matmul& mm);

  void insert(int64_t layer, int64_t expert, io::ExpertWeights w) { weights_[layer * num_experts_ + expert] = std::move(w); }
  const io::ExpertWeights& get(int64_t layer, int64_t expert) const;
  bool has(int64_t layer, int64_t expert) const;
  bool owns(int64_t layer, int64_t expert) const override { return has(layer, expert); }
  const io::ExpertWeights& acquire(int64_t layer, int64_t expert) override { return get(layer, expert); }
  // Packs the new weights into the old ones' buffers (needs the loading constructor).
  void replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) override;
  int64_t count() const { return static_cast<int64_t>(weights_.size()); }
  int64_t bytes() const;

 private:
  int64_t num_experts_;
  io::ModelConfig config_;
  Matmul* mm_ = nullptr;
  std::unordered_map<int64_t, io::ExpertWeights> weights_;
};

}  // namespace moerun::experts
