// Reading a checkpoint's tensors for convert: each checked against the shape the config implies,
// scanned (finite floats, no e4m3 NaN, fp8 scales the kernels take), and counted for progress and for
// the check that every tensor was used. Also the checkpoint's layer and expert names.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/native_quant.hpp"
#include "convert/compressed_tensors.hpp"
#include "convert/hf_checkpoint.hpp"
#include "io/model_file.hpp"

namespace moerun::convert {

// An fp8 checkpoint's weight "X.weight" (float8 e4m3fn) has its block scales in "X.weight_scale_inv"
// (float32 [ceil(rows/128), ceil(cols/128)], the weight being e4m3 times them: DeepSeek-V3's and
// Qwen3-FP8's quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128]}).
inline constexpr const char* kFp8ScaleSuffix = "_scale_inv";

inline std::string layer_name(int64_t l, const std::string& rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}
inline std::string expert_name(int64_t l, int64_t e, const std::string& pattern) {
  std::string s = pattern;
  s.replace(s.find("{e}"), 3, std::to_string(e));
  return layer_name(l, s);
}

// Reads one tensor after checking its shape against the config, and checks it is finite.
class TensorReader {
 public:
  TensorReader(const HfCheckpoint& ckpt, uint64_t total, const std::function<void(uint64_t, uint64_t)>& progress)
      : ckpt_(ckpt), total_(total), progress_(progress) {}
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) {
    check_shape(name, shape);
    std::vector<float> v;
    if (ckpt_.info(name).dtype == "F8_E4M3") {  // dequantized with its block scales (the dense layers of an fp8 checkpoint)
      const Fp8Tensor t = read_fp8(name, shape);
      v.resize(t.values.size());
      dequantize_fp8_block(t.values.data(), t.scales.data(), shape[1], 0, shape[0], v.data());
    } else if (ckpt_.info(name).dtype == "INT4") {  // compressed-tensors INT4, dequantized as it does
      v = dequantize(read_int4(name, shape));
    } else {
      v = ckpt_.read_f32(name);
      count(name);
    }
    io::check_finite(v.data(), DType::F32, 1, static_cast<int64_t>(v.size()), ckpt_.file_of(name), ckpt_.spelled(name));
    return v;
  }
  // An fp8 matrix as shipped: its e4m3 bytes and float32 block scales (name + "_scale_inv"), each
  // scanned: no NaN code, every scale one the kernels take (fp8_scale_ok: finite, products that fit float32).
  struct Fp8Tensor {
    std::vector<unsigned char> values;
    std::vector<float> scales;
  };
  Fp8Tensor read_fp8(const std::string& name, const std::vector<int64_t>& shape) {
    check_shape(name, shape);
    Fp8Tensor t{ckpt_.read_raw(name), ckpt_.read_f32(name + kFp8ScaleSuffix)};
    scan_fp8(name, t, shape[1]);
    count(name);
    count(name + kFp8ScaleSuffix);
    return t;
  }
  // No e4m3 NaN code, every scale one the kernels take; `name` may carry a slice's index.
  void scan_fp8(const std::string& name, const Fp8Tensor& t, int64_t cols) const {
    const std::string base = name.substr(0, name.find('['));
    const std::string spelled = ckpt_.spelled(base) + name.substr(base.size());
    for (std::size_t i = 0; i < t.values.size(); ++i)
      if (e4m3_is_nan(t.values[i]))
        fail(ErrorKind::BadInput, ckpt_.file_of(base), ": tensor ", spelled, " contains an e4m3 NaN at [", i / cols, ",", i % cols, "]");
    for (std::size_t i = 0; i < t.scales.size(); ++i)
      if (!fp8_scale_ok(t.scales[i]))
        fail(ErrorKind::BadInput, ckpt_.file_of(base), ": tensor ", ckpt_.spelled(base), kFp8ScaleSuffix, name.substr(base.size()), " has ",
             t.scales[i], " at ", i, ": a block scale must be finite and below ", kFp8ScaleBound,
             " (its weights' products would overflow float32)");
  }
  // A compressed-tensors INT4 matrix as shipped (convert/compressed_tensors.hpp), its parts counted.
  PackedInt4Matrix read_int4(const std::string& name, const std::vector<int64_t>& shape) {
    check_shape(name, shape);
    PackedInt4Matrix m = read_packed_int4(ckpt_, name, shape[0], shape[1]);
    count(name);
    return m;
  }
  // Slice `index` of a stacked fp8 tensor [E, rows, cols] (one expert) with its scales' slice, scanned
  // as read_fp8 scans a whole matrix.
  Fp8Tensor read_fp8_slice(const std::string& name, const std::vector<int64_t>& shape, int64_t index) {
    check_shape(name, shape);
    Fp8Tensor t{ckpt_.read_raw(name, index), ckpt_.read_f32(name + kFp8ScaleSuffix, index)};
    scan_fp8(name + "[" + std::to_string(index) + "]", t, shape.back());
    count_slice(name);
    count_slice(name + kFp8ScaleSuffix);
    return t;
  }
  // Slice `index` of a fused [E, ...] tensor (one expert), its whole shape checked; floats or bytes.
  std::vector<float> read_slice(const std::string& name, const std::vector<int64_t>& shape, int64_t index) {
    check_shape(name, shape);
    std::vector<float> v = ckpt_.read_f32(name, index);
    io::check_finite(v.data(), DType::F32, 1, static_cast<int64_t>(v.size()), ckpt_.file_of(name),
                     ckpt_.spelled(name) + "[" + std::to_string(index) + "]");
    count_slice(name);
    return v;
  }
  std::vector<unsigned char> read_bytes_slice(const std::string& name, const std::vector<int64_t>& shape, int64_t index) {
    check_shape(name, shape);
    std::vector<unsigned char> v = ckpt_.read_raw(name, index);
    count_slice(name);
    return v;
  }
  // Counts a tensor (or one slice) as done without reading it (its file was kept from an earlier run).
  void skip(const std::string& name, bool slice = false) {
    if (slice) {
      count_slice(name);
      if (ckpt_.info(name).dtype == "F8_E4M3") count_slice(name + kFp8ScaleSuffix);
      return;
    }
    count(name);
    if (ckpt_.info(name).dtype == "F8_E4M3") count(name + kFp8ScaleSuffix);
  }
  // Counts X.weight as read, with a packed one's other parts (its values are X.weight's bytes).
  void count(const std::string& name) {
    const SafetensorInfo& info = ckpt_.info(name);
    used_.insert(name);
    done_ += info.end - info.begin;
    if (info.dtype == "INT4")
      for (const char* part : {"_scale", "_shape", "_zero_point"})
        if (ckpt_.has(name + part)) {
          used_.insert(name + part);
          done_ += ckpt_.info(name + part).end - ckpt_.info(name + part).begin;
        }
    if (progress_) progress_(done_, total_);
  }
  const std::set<std::string>& used() const { return used_; }
  std::string file_of(const std::string& name) const { return ckpt_.file_of(name); }
  uint64_t done() const { return done_; }

 private:
  void check_shape(const std::string& name, const std::vector<int64_t>& shape) const {
    const SafetensorInfo& info = ckpt_.info(name);
    if (info.shape != shape)
      fail(ErrorKind::BadInput, ckpt_.file_of(name), ": tensor ", ckpt_.spelled(name), " has shape ", io::shape_str(info.shape),
           ", config.json says ", io::shape_str(shape));
  }
  void count_slice(const std::string& name) {
    const SafetensorInfo& info = ckpt_.info(name);
    used_.insert(name);
    done_ += (info.end - info.begin) / static_cast<uint64_t>(info.shape[0]);
    if (progress_) progress_(done_, total_);
  }
  const HfCheckpoint& ckpt_;
  uint64_t total_, done_ = 0;
  const std::function<void(uint64_t, uint64_t)>& progress_;
  std::set<std::string> used_;
};

}  // namespace moerun::convert
