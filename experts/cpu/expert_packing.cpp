// Expert weight packing.
#include "experts/cpu/expert_packing.hpp"

#include "base/error.hpp"

#include <cstring>
#include <tuple>
#include <vector>

#include "base/native_matmul.hpp"
#include "base/quant_matmul.hpp"
#include "io/model_file.hpp"

namespace moerun::experts {

namespace {
// The three matrices of an expert with their shapes: w1, w3 [ff, d], w2 [d, ff].
std::tuple<WeightMatrix*, int64_t, int64_t> matrices(FfnWeights& w, const model::ModelConfig& c, int i) {
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  WeightMatrix* m[] = {&w.w1, &w.w3, &w.w2};
  return {m[i], i == 2 ? d : ff, i == 2 ? ff : d};
}
const char* const kMatrixNames[] = {"w1", "w3", "w2"};

bool quantized(const model::ModelConfig& c) {
  return c.expert_format.scheme != WeightScheme::Plain;
}

// A quantized matrix shaped for its kernel's blocked form: quant_matmul's (q8/q4) or native_matmul's
// (mxfp4/fp8-block), reusing the buffer when big enough.
void shape_quantized(WeightMatrix& m, const model::ModelConfig& c, int64_t rows, int64_t cols) {
  m.dtype = c.dtype;
  m.scheme = c.expert_format.scheme;
  m.rows = rows;
  m.cols = cols;
  m.packed = nullptr;
  m.data.resize(static_cast<std::size_t>(is_native_quantized(m.scheme) ? native_blocked_bytes(m.scheme, rows, cols)
                                                                       : quant_blocked_bytes(m.scheme, rows, cols)));
}
}  // namespace

void pack_expert_from_raw(Matmul& mm, const void* raw, const model::ModelConfig& c, FfnWeights& into) {
  const auto* b = static_cast<const unsigned char*>(raw);
  const std::vector<io::ExpertPart> parts = io::expert_raw_parts(c);
  for (int i = 0; i < 3; ++i) {
    auto [m, rows, cols] = matrices(into, c, i);
    const io::ExpertPart& values = io::expert_part(parts, kMatrixNames[i]);
    if (!quantized(c)) {
      mm.pack_from(b + values.offset, c.dtype, rows, cols, *m, kFfnTypicalRows);
      continue;
    }
    const io::ExpertPart& scales = io::expert_part(parts, std::string(kMatrixNames[i]) + "_scales");
    shape_quantized(*m, c, rows, cols);
    if (is_native_quantized(m->scheme))
      native_pack(m->scheme, b + values.offset, b + scales.offset, rows, cols, m->data.as<uint8_t>());
    else {
      const uint8_t* levels =
          m->scheme == WeightScheme::Int4 ? b + io::expert_part(parts, std::string(kMatrixNames[i]) + "_levels").offset : nullptr;
      quant_pack(m->scheme, b + values.offset, reinterpret_cast<const uint16_t*>(b + scales.offset), rows, cols, m->data.as<uint8_t>(),
                 levels);
    }
  }
  if (!c.expert_bias) return;
  // b1‖b3‖b2 are adjacent in the raw form, in the same order as FfnWeights::bias.
  const std::size_t n = static_cast<std::size_t>(c.expert_bias_params());
  const std::size_t at = io::expert_part(parts, "b1").offset;
  into.bias.resize(n * sizeof(float));
  if (c.dtype == DType::F32)
    std::memcpy(into.bias.data(), b + at, n * sizeof(float));
  else
    bf16_to_f32(reinterpret_cast<const uint16_t*>(b + at), into.bias.as<float>(), n);
}

void preallocate_expert(Matmul& mm, const model::ModelConfig& c, FfnWeights& w) {
  for (int i = 0; i < 3; ++i) {
    auto [m, rows, cols] = matrices(w, c, i);
    if (quantized(c))
      shape_quantized(*m, c, rows, cols);
    else
      mm.shape_packed(*m, c.dtype, rows, cols, kFfnTypicalRows);
    std::memset(m->data.data(), 0, m->data.size());  // fault the pages in now, not on the first load
  }
  if (c.expert_bias) {
    w.bias.resize(static_cast<std::size_t>(c.expert_bias_params()) * sizeof(float));
    std::memset(w.bias.data(), 0, w.bias.size());
  }
}

int64_t packed_expert_bytes(Matmul& mm, const model::ModelConfig& c) {
  int64_t total = 0;
  FfnWeights w;  // shaped only: the buffers are allocated, never touched
  for (int i = 0; i < 3; ++i) {
    auto [m, rows, cols] = matrices(w, c, i);
    if (quantized(c))
      shape_quantized(*m, c, rows, cols);
    else
      mm.shape_packed(*m, c.dtype, rows, cols, kFfnTypicalRows);
    total += static_cast<int64_t>(m->data.capacity());
  }
  return total + c.expert_bias_params() * static_cast<int64_t>(sizeof(float));
}

std::string expert_layout_name(Matmul& mm, const model::ModelConfig& c) {
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  if (is_group_quantized(c.expert_format.scheme))
    return str(c.expert_format.name(), "-blocked16x32-v1 [", ff, ",", d, "];[", d, ",", ff, "]");
  if (quantized(c)) return str(c.expert_format.name(), "-blocked16-v2 [", ff, ",", d, "];[", d, ",", ff, "]");
  return mm.packed_layout_name(c.dtype, ff, d, kFfnTypicalRows) + ";" + mm.packed_layout_name(c.dtype, d, ff, kFfnTypicalRows);
}

void check_packed_finite(FfnWeights& w, const model::ModelConfig& c, const std::string& where, const std::string& group) {
  for (int i = 0; i < 3; ++i) {
    auto [m, rows, cols] = matrices(w, c, i);
    const std::string tensor = group + "/" + kMatrixNames[i] + " (packed, in L2)";
    if (m->scheme == WeightScheme::Plain) {
      io::check_finite(m->data.data(), c.dtype, 1, static_cast<int64_t>(m->data.size() / dtype_size(c.dtype)), where, tensor);
      continue;
    }
    if (is_native_quantized(m->scheme)) {
      const char* what = nullptr;
      const int64_t at = native_blocked_find_bad(m->scheme, rows, cols, m->data.as<uint8_t>(), &what);
      if (at >= 0)
        fail(ErrorKind::BadInput, where, ": ", tensor, " contains ", what, " (element ", at, " of its values or scales as stored)");
      continue;
    }
    const int64_t bad = quant_blocked_find_bad(m->scheme, rows, cols, m->data.as<uint8_t>());
    if (bad >= 0) fail(ErrorKind::BadInput, where, ": ", tensor, " scales contain NaN or Inf (scale ", bad, " in block order)");
  }
  if (w.bias.size() > 0)
    io::check_finite(w.bias.data(), DType::F32, 1, static_cast<int64_t>(w.bias.size() / 4), where, group + "/biases (packed, in L2)");
}

}  // namespace moerun::experts
