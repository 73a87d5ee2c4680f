// Expert weight packing.
#include "experts/cpu/expert_packing.hpp"

#include <cstring>
#include <vector>
#include <tuple>

namespace moerun::experts {

void pack_expert(Matmul& mm, FfnWeights& w) {
  mm.pack(w.w1, kExpertTypicalRows);
  mm.pack(w.w3, kExpertTypicalRows);
  mm.pack(w.w2, kExpertTypicalRows);
}

void pack_expert_from_raw(Matmul& mm, const void* raw, const io::ModelConfig& c, FfnWeights& into) {
  const auto* b = static_cast<const unsigned char*>(raw);
  const std::vector<io::ExpertPart> parts = io::expert_raw_parts(c);
  mm.pack_from(b + parts[0].offset, c.dtype, c.intermediate_size, c.hidden_size, into.w1, kExpertTypicalRows);
  mm.pack_from(b + parts[1].offset, c.dtype, c.intermediate_size, c.hidden_size, into.w3, kExpertTypicalRows);
  mm.pack_from(b + parts[2].offset, c.dtype, c.hidden_size, c.intermediate_size, into.w2, kExpertTypicalRows);
  if (!c.expert_bias) return;
  // b1‖b3‖b2 follow the matrices in the raw form, in the same order as FfnWeights::bias.
  const std::size_t n = static_cast<std::size_t>(c.expert_bias_params());
  into.bias.resize(n * sizeof(float));
  if (c.dtype == DType::F32) std::memcpy(into.bias.data(), b + parts[3].offset, n * sizeof(float));
  else bf16_to_f32(reinterpret_cast<const uint16_t*>(b + parts[3].offset), into.bias.as<float>(), n);
}

void preallocate_expert(Matmul& mm, const io::ModelConfig& c, FfnWeights& w) {
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  for (auto [m, rows, cols] : {std::tuple{&w.w1, ff, d}, std::tuple{&w.w3, ff, d}, std::tuple{&w.w2, d, ff}}) {
    mm.shape_packed(*m, c.dtype, rows, cols, kExpertTypicalRows);
    std::memset(m->data.data(), 0, m->data.size());  // fault the pages in now, not on the first load
  }
  if (c.expert_bias) {
    w.bias.resize(static_cast<std::size_t>(c.expert_bias_params()) * sizeof(float));
    std::memset(w.bias.data(), 0, w.bias.size());
  }
}

int64_t packed_expert_bytes(Matmul& mm, const io::ModelConfig& c) {
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  int64_t total = 0;
  FfnWeights w;  // shaped only: the buffers are allocated, never touched
  for (auto [m, rows, cols] : {std::tuple{&w.w1, ff, d}, std::tuple{&w.w3, ff, d}, std::tuple{&w.w2, d, ff}}) {
    mm.shape_packed(*m, c.dtype, rows, cols, kExpertTypicalRows);
    total += static_cast<int64_t>(m->data.capacity());
  }
  return total + c.expert_bias_params() * static_cast<int64_t>(sizeof(float));
}

std::string expert_layout_name(Matmul& mm, const io::ModelConfig& c) {
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  return mm.packed_layout_name(c.dtype, ff, d, kExpertTypicalRows) + ";" +
         mm.packed_layout_name(c.dtype, d, ff, kExpertTypicalRows);
}

}  // namespace moerun::experts
