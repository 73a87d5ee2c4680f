// MXFP4 (OCP Microscaling, as gpt-oss ships its experts): blocks of 32 E2M1 values, two per byte
// (low nibble first), and one E8M0 scale byte per block (2^(s - 127)).
#pragma once
#include <cstdint>

namespace moerun::io {

inline constexpr int64_t kMxfp4Block = 32;  // values per scale
inline constexpr int64_t kMxfp4BlockBytes = kMxfp4Block / 2;

// out[r, g*32 + 2i] = e2m1(blocks[r, g, i] & 15) * 2^(scales[r, g] - 127), the high nibble at 2i + 1,
// for `rows` rows of `groups` blocks: what transformers' convert_moe_packed_tensors computes,
// before its transpose. Exact: every value is a float32 (an E8M0 scale of 255 gives Inf or NaN,
// which the caller's finite check names).
void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups, float* out);

}  // namespace moerun::io
