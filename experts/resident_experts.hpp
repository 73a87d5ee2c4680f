// ResidentExperts: the experts a rank owns, all loaded into the backend's memory at start (checksums
// verified). The tiered cache (L1/L2/L3) replaces this when experts no longer fit.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "experts/backend.hpp"
#include "experts/expert_store.hpp"
#include "io/expert_shards.hpp"

namespace moerun::experts {

class ResidentExperts : public ExpertStore {
 public:
  ResidentExperts(ExpertBackend& backend, int64_t num_experts) : backend_(backend), num_experts_(num_experts) {}
  // Loads every (layer, expert) for which `owns` is true into the backend.
  ResidentExperts(ExpertBackend& backend, const io::ExpertShardIndex& index, const model::ModelConfig& config,
                  const std::function<bool(int64_t, int64_t)>& owns);

  void insert(int64_t layer, int64_t expert, std::unique_ptr<ResidentExpert> w);
  const ResidentExpert& get(int64_t layer, int64_t expert) const;
  bool has(int64_t layer, int64_t expert) const;
  bool owns(int64_t layer, int64_t expert) const override { return has(layer, expert); }
  const ResidentExpert& acquire(int64_t layer, int64_t expert) override { return get(layer, expert); }
  bool holds_all() const override { return true; }
  // Loads the new weights into the old ones' memory.
  void replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) override;
  std::vector<std::exception_ptr> prepare(const std::vector<std::pair<int64_t, int64_t>>& experts) override;
  void hold(const std::function<bool(int64_t, int64_t)>& holds) override;
  int64_t count() const { return static_cast<int64_t>(weights_.size()); }
  int64_t bytes() const;  // allocated, in the backend's memory

 private:
  ExpertBackend& backend_;
  const io::ExpertShardIndex* index_ = nullptr;  // where prepare() reads (none: built by insert())
  int64_t num_experts_;
  std::unordered_map<int64_t, std::unique_ptr<ResidentExpert>> weights_;
  std::unordered_map<int64_t, std::unique_ptr<ResidentExpert>> prepared_;  // by prepare(), until hold()
};

}  // namespace moerun::experts
