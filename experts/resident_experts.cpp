// Loading of a rank's resident experts.
#include "experts/resident_experts.hpp"

#include "base/error.hpp"
#include "base/log.hpp"

namespace moerun::experts {

ResidentExperts::ResidentExperts(const io::ExpertShardIndex& index, const io::ModelConfig& c,
                                 const std::function<bool(int64_t, int64_t)>& owns, bool check_finite, Matmul& mm)
    : num_experts_(c.num_experts) {
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t e = 0; e < c.num_experts; ++e) {
      if (!owns(l, e)) continue;
      io::ExpertWeights w = index.load(l, e, check_finite);
      pack_expert(mm, w);
      weights_.emplace(l * c.num_experts + e, std::move(w));
    }
  log::debug("loaded ", weights_.size(), " experts (", bytes() >> 20, " MiB)");
}

bool ResidentExperts::has(int64_t layer, int64_t expert) const {
  return weights_.count(layer * num_experts_ + expert) > 0;
}

const io::ExpertWeights& ResidentExperts::get(int64_t layer, int64_t expert) const {
  auto it = weights_.find(layer * num_experts_ + expert);
  if (it == weights_.end()) fail(ErrorKind::Internal, "expert (", layer, ", ", expert, ") is not resident on this rank");
  return it->second;
}

int64_t ResidentExperts::bytes() const {
  int64_t b = 0;
  for (const auto& [k, w] : weights_) b += static_cast<int64_t>(w.w1.data.size() + w.w3.data.size() + w.w2.data.size());
  return b;
}

}  // namespace moerun::experts
