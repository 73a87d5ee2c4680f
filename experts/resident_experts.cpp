// Loading of a rank's resident experts.
#include "experts/resident_experts.hpp"

#include "base/error.hpp"
#include "base/log.hpp"

#include <exception>
#include <vector>

namespace moerun::experts {

ResidentExperts::ResidentExperts(ExpertBackend& backend, const io::ExpertShardIndex& index, const model::ModelConfig& c,
                                 const std::function<bool(int64_t, int64_t)>& owns)
    : backend_(backend), index_(&index), num_experts_(c.num_experts) {
  int64_t owned = 0;
  for (int64_t l = 0; l < c.num_moe_layers(); ++l)
    for (int64_t e = 0; e < c.num_experts; ++e) owned += owns(l, e) ? 1 : 0;
  const int64_t need = owned * backend.expert_bytes(), have = backend.memory_bytes();
  if (have > 0 && need > have)
    fail(ErrorKind::BadInput, index.shards().empty() ? std::string("model") : index.shards().front(), ": this rank's ", owned,
         " experts need ", need >> 20, " MiB in ", memory_kind_name(backend.weight_memory()), " memory, more than the ", have >> 20,
         " MiB there (", backend.describe(), "); use more expert ranks or the expert cache (--l1-bytes)");
  // Read, verified and packed by all threads at once (packing is CPU work the disk need not wait
  // for); the first failure in (layer, expert) order is the one reported, as in one thread.
  std::vector<int64_t> keys;
  for (int64_t l = 0; l < c.num_moe_layers(); ++l)
    for (int64_t e = 0; e < c.num_experts; ++e)
      if (owns(l, e)) keys.push_back(l * c.num_experts + e);
  std::vector<std::unique_ptr<ResidentExpert>> loaded(keys.size());
  std::vector<std::exception_ptr> failed(keys.size());
  const bool host = backend.weight_memory() == MemoryKind::Host;
#pragma omp parallel if (host && keys.size() > 1)
  {
    AlignedBuffer raw;
#pragma omp for schedule(dynamic)
    for (std::size_t i = 0; i < keys.size(); ++i) {
      try {
        const int64_t l = keys[i] / c.num_experts, e = keys[i] % c.num_experts;
        index.read_raw_into(l, e, raw);
        io::verify_expert(raw.data(), c, index.checksum(l, e), index.where(l, e), l, e);
        loaded[i] = backend.allocate_expert();
        backend.load_expert(raw.data(), *loaded[i]);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    }
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (failed[i]) std::rethrow_exception(failed[i]);
    weights_.emplace(keys[i], std::move(loaded[i]));
  }
  log::debug("loaded ", weights_.size(), " experts (", bytes() >> 20, " MiB, ", backend.describe(), ")");
}

void ResidentExperts::insert(int64_t layer, int64_t expert, std::unique_ptr<ResidentExpert> w) {
  weights_[layer * num_experts_ + expert] = std::move(w);
}

void ResidentExperts::replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) {
  (void)xxh64, (void)where;  // verified by the caller
  if (!has(layer, expert)) fail(ErrorKind::Internal, "hot swap of expert (", layer, ", ", expert, "), not held here");
  // Into the old expert's memory: no allocation, no page faults, and nothing reads it between steps.
  backend_.load_expert(raw, *weights_[layer * num_experts_ + expert]);
}

std::vector<std::exception_ptr> ResidentExperts::prepare(const std::vector<std::pair<int64_t, int64_t>>& experts) {
  std::vector<std::exception_ptr> errors;
  for (const auto& [l, e] : experts) {
    try {
      if (!index_) fail(ErrorKind::Internal, "ResidentExperts::prepare without a shard index");
      const AlignedBuffer raw = index_->load_raw(l, e);  // verified
      std::unique_ptr<ResidentExpert> w = backend_.allocate_expert();
      backend_.load_expert(raw.data(), *w);
      prepared_[l * num_experts_ + e] = std::move(w);
      errors.emplace_back();
    } catch (...) {
      errors.push_back(std::current_exception());
    }
  }
  return errors;
}

void ResidentExperts::hold(const std::function<bool(int64_t, int64_t)>& holds) {
  for (auto it = weights_.begin(); it != weights_.end();)
    it = holds(it->first / num_experts_, it->first % num_experts_) ? std::next(it) : weights_.erase(it);
  for (auto& [k, w] : prepared_)
    if (holds(k / num_experts_, k % num_experts_)) weights_[k] = std::move(w);
  prepared_.clear();
}

bool ResidentExperts::has(int64_t layer, int64_t expert) const {
  return weights_.count(layer * num_experts_ + expert) > 0;
}

const ResidentExpert& ResidentExperts::get(int64_t layer, int64_t expert) const {
  auto it = weights_.find(layer * num_experts_ + expert);
  if (it == weights_.end()) fail(ErrorKind::Internal, "expert (", layer, ", ", expert, ") is not resident on this rank");
  return *it->second;
}

int64_t ResidentExperts::bytes() const {
  int64_t b = 0;
  for (const auto& [k, w] : weights_) b += static_cast<int64_t>(w->buffer().allocated);
  return b;
}

}  // namespace moerun::experts
