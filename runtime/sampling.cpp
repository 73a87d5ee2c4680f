// Sampling implementation.
#include "runtime/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/splitmix64.hpp"

namespace moerun::runtime {

double uniform01(uint64_t seed, int64_t step) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int32_t argmax(const float* logits, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t sample_token(const float* logits, int64_t V, double temperature, double top_p, uint64_t seed, int64_t step) {
  if (temperature <= 0) return argmax(logits, V);
  double mx = logits[0];
  for (int64_t i = 1; i < V; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  std::vector<double> p(static_cast<std::size_t>(V));
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
  std::vector<int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  // Nucleus: the smallest prefix whose mass reaches top_p.
  double mass = 0;
  std::size_t keep = 0;
  while (keep < order.size()) {
    mass += p[order[keep++]] / sum;
    if (mass >= top_p) break;
  }
  double u = uniform01(seed, step) * mass * sum;
  for (std::size_t i = 0; i < keep; ++i) {
    u -= p[order[i]];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace moerun::runtime
