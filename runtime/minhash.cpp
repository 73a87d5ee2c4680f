// MinHash over 64-bit elements with seeded splitmix64 mixes as the hash family.
#include "runtime/minhash.hpp"

#include <algorithm>
#include <limits>

#include "base/splitmix64.hpp"

namespace moerun::runtime {
namespace {

constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();

}  // namespace

MinHashSignature minhash_of(const std::vector<int64_t>& elements) {
  MinHashSignature sig(kMinHashSize, kEmpty);
  for (int64_t x : elements) {
    const uint64_t base = splitmix64(static_cast<uint64_t>(x));
    for (int i = 0; i < kMinHashSize; ++i)
      sig[static_cast<std::size_t>(i)] =
          std::min(sig[static_cast<std::size_t>(i)], splitmix64(base ^ splitmix64(static_cast<uint64_t>(i) + 1)));
  }
  return sig;
}

double estimated_jaccard(const MinHashSignature& a, const MinHashSignature& b) {
  if (a.size() != b.size() || a.empty()) return 0.0;
  int equal = 0;
  for (std::size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i] && a[i] != kEmpty ? 1 : 0;
  return static_cast<double>(equal) / static_cast<double>(a.size());
}

std::vector<int64_t> expert_set(const std::vector<std::vector<int32_t>>& routing, int64_t num_experts) {
  std::vector<int64_t> out;
  for (std::size_t l = 0; l < routing.size(); ++l)
    for (int32_t e : routing[l])
      if (e >= 0) out.push_back(static_cast<int64_t>(l) * num_experts + e);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace moerun::runtime
