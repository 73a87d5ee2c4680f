// What the forward pass leaves behind, for scheduler tests that fabricate the logits: K/V appended
// to each chunk's cache (zeros: only the lengths matter), and with slots_per_token > 0 that many
// expert slots (expert 0) per prompt token in every MoE layer of the chunk's routing.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/model_forward.hpp"

namespace moerun::runtime {

inline void fake_forward(const StepBatch& b, int64_t slots_per_token = 0) {
  for (const auto& ch : b.chunks) {
    std::vector<float> z(static_cast<std::size_t>(ch.count * ch.kv->row_state(0).k_dim), 0.0f);
    ch.kv->append(0, z.data(), z.data(), ch.count);
    if (ch.routing && slots_per_token > 0)
      for (auto& layer : *ch.routing) layer.insert(layer.end(), static_cast<std::size_t>(ch.count * slots_per_token), 0);
  }
}

}  // namespace moerun::runtime
