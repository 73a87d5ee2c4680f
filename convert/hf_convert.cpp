// Hugging Face checkpoint -> moe-hdf5: config mapping, tensor name maps per architecture, shard
// plan, atomic and resumable file writes.
#include "convert/hf_convert.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <tuple>

#include "base/weight_scheme_table.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/xxh64.hpp"
#include "io/expert_shards.hpp"
#include "io/hdf5.hpp"
#include "convert/compressed_tensors.hpp"
#include "convert/hf_checkpoint.hpp"
#include "model/hf_config.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"
#include "model/model_family.hpp"
#include "io/model_file.hpp"
#include "base/native_quant.hpp"
#include "io/output_file.hpp"
#include "io/private_dir.hpp"

namespace moerun::convert {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// An fp8 checkpoint's weight "X.weight" (float8 e4m3fn) has its block scales in "X.weight_scale_inv"
// (float32 [ceil(rows/128), ceil(cols/128)], the weight being e4m3 times them: DeepSeek-V3's and
// Qwen3-FP8's quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128]}).
constexpr const char* kFp8ScaleSuffix = "_scale_inv";

std::string layer_name(int64_t l, const std::string& rest) { return "model.layers." + std::to_string(l) + "." + rest; }
std::string expert_name(int64_t l, int64_t e, const std::string& pattern) {
  std::string s = pattern;
  s.replace(s.find("{e}"), 3, std::to_string(e));
  return layer_name(l, s);
}

// Rows `rows` (first index) of a tensor of `shape`, in that order.
std::vector<float> gather_rows(const std::vector<float>& t, const std::vector<int64_t>& shape, const std::vector<int64_t>& rows) {
  const std::size_t width = t.size() / static_cast<std::size_t>(shape[0]);
  std::vector<float> out(rows.size() * width);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::copy_n(t.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rows[i]) * width), width,
                out.begin() + static_cast<std::ptrdiff_t>(i * width));
  return out;
}

// xxh64 of a file's bytes, read in blocks.
uint64_t file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, path, ": cannot open");
  Xxh64 h;
  std::vector<char> buf(8u << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.bytes(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  return h.digest();
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
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
        fail(ErrorKind::BadInput, ckpt_.file_of(base), ": tensor ", ckpt_.spelled(base), kFp8ScaleSuffix, name.substr(base.size()), " has ", t.scales[i],
             " at ", i, ": a block scale must be finite and below ", kFp8ScaleBound, " (its weights' products would overflow float32)");
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
    io::check_finite(v.data(), DType::F32, 1, static_cast<int64_t>(v.size()), ckpt_.file_of(name), ckpt_.spelled(name) + "[" + std::to_string(index) + "]");
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
      fail(ErrorKind::BadInput, ckpt_.file_of(name), ": tensor ", ckpt_.spelled(name), " has shape ", io::shape_str(info.shape), ", config.json says ",
           io::shape_str(shape));
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

// One expert as the shard writer takes it: float32 w1, w3 [ff, d], w2 [d, ff], biases b1‖b3‖b2.
struct ExpertTensors {
  std::vector<float> w1, w3, w2, bias;
};

// A tensor the config implies: its shape, and whether it is packed bytes (MXFP4) or floats (which an
// fp8 checkpoint may hold as e4m3 with block scales).
struct ExpectedTensor {
  std::vector<int64_t> shape;
  bool bytes = false;
};

// The raw form's bytes of biases b1‖b3‖b2 (float32) in the model's dtype, at `out`.
void store_biases(const std::vector<float>& bias, DType dtype, unsigned char* out) {
  if (dtype == DType::F32) std::memcpy(out, bias.data(), bias.size() * 4);
  else f32_to_bf16(bias.data(), reinterpret_cast<uint16_t*>(out), bias.size());
}

// How a checkpoint holds its experts: one tensor per matrix and expert (Mixtral, Qwen, OLMoE); per
// layer stacked over the experts as transformers 5.x saves every family with per-expert names and
// as the Hub ships Qwen3.5/3.6 (Stacked: EXPERTS.gate_up_proj [E, 2ff, d], the gate's ff rows then
// the up's, and EXPERTS.down_proj [E, d, ff], where EXPERTS is the per-expert names' module, or
// mlp.experts); or per layer fused over the experts (gpt-oss): gate_up_proj [E, d, 2ff] with gate
// and up in alternating columns and down_proj [E, ff, d], as transformers saves them, or as
// shipped in MXFP4 (gate_up_proj_blocks [E, 2ff, d/32, 16] and _scales [E, 2ff, d/32], down_proj
// likewise over ff).
// Per-expert matrices may be fp8 (e4m3 with 128 x 128 block scales) or compressed-tensors INT4. The
// native forms (MXFP4, fp8, INT4) are kept as shipped when the model's expert format is theirs
// (read_raw), and dequantized exactly otherwise (read).
class CheckpointExperts {
 public:
  enum class Form { PerExpert, Stacked, Fused, Mxfp4 };
  CheckpointExperts(const HfCheckpoint& ckpt, const model::ModelConfig& c, const model::NameMap& nm) : c_(c), nm_(nm) {
    if (!nm.expert_w1.empty()) form_ = stacked_module(ckpt) ? Form::Stacked : Form::PerExpert;
    else form_ = ckpt.has(layer_name(0, "mlp.experts.gate_up_proj_blocks")) ? Form::Mxfp4 : Form::Fused;
    if (form_ == Form::Stacked) {
      // fp8 as transformers 5.x saves a FineGrainedFP8 model: gate_up_proj and down_proj in e4m3 with
      // their block scales stacked beside them ([E, ceil(rows/128), ceil(cols/128)]).
      fp8_ = true;
      for (int64_t l = 0; l < c.num_layers; ++l)
        for (const char* t : {"gate_up_proj", "down_proj"})
          fp8_ = fp8_ && (!c.is_moe_layer(l) || (ckpt.has(stacked(l, t)) && ckpt.info(stacked(l, t)).dtype == "F8_E4M3"));
      return;
    }
    if (form_ != Form::PerExpert) return;
    // fp8 or INT4 when every expert matrix is (a mix is dequantized; the config check names a missing one).
    fp8_ = all_experts(ckpt, "F8_E4M3");
    int4_ = all_experts(ckpt, "INT4");
  }
  Form form() const { return form_; }
  bool fp8() const { return fp8_; }
  // The form the checkpoint ships its experts in: mxfp4, fp8-block, or plain (floats).
  // Stacked fp8 splits gate_up_proj's block grid between w1 and w3: kept only where the gate's rows
  // end on a block (ff a multiple of 128, as every shipped width is), else dequantized.
  WeightScheme native() const {
    if (form_ == Form::Mxfp4) return WeightScheme::Mxfp4;
    if (fp8_ && form_ == Form::Stacked && c_.intermediate_size % kFp8Block != 0) return WeightScheme::Plain;
    return fp8_ ? WeightScheme::Fp8Block : int4_ ? WeightScheme::Int4 : WeightScheme::Plain;
  }

  void expect(std::map<std::string, ExpectedTensor>& out) const {
    const int64_t E = c_.num_experts, ff = c_.intermediate_size, d = c_.hidden_size;
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      if (!c_.is_moe_layer(l)) continue;
      if (form_ == Form::PerExpert) {
        for (int64_t e = 0; e < E; ++e) {
          out[expert_name(l, e, nm_.expert_w1)] = {{ff, d}};
          out[expert_name(l, e, nm_.expert_w3)] = {{ff, d}};
          out[expert_name(l, e, nm_.expert_w2)] = {{d, ff}};
        }
        continue;
      }
      if (form_ == Form::Stacked) {
        out[stacked(l, "gate_up_proj")] = {{E, 2 * ff, d}};
        out[stacked(l, "down_proj")] = {{E, d, ff}};
        continue;
      }
      out[layer_name(l, "mlp.experts.gate_up_proj_bias")] = {{E, 2 * ff}};
      out[layer_name(l, "mlp.experts.down_proj_bias")] = {{E, d}};
      if (form_ == Form::Fused) {
        out[layer_name(l, "mlp.experts.gate_up_proj")] = {{E, d, 2 * ff}};
        out[layer_name(l, "mlp.experts.down_proj")] = {{E, ff, d}};
      } else {
        out[layer_name(l, "mlp.experts.gate_up_proj_blocks")] = {{E, 2 * ff, d / kMxfp4Block, kMxfp4BlockBytes}, true};
        out[layer_name(l, "mlp.experts.gate_up_proj_scales")] = {{E, 2 * ff, d / kMxfp4Block}, true};
        out[layer_name(l, "mlp.experts.down_proj_blocks")] = {{E, d, ff / kMxfp4Block, kMxfp4BlockBytes}, true};
        out[layer_name(l, "mlp.experts.down_proj_scales")] = {{E, d, ff / kMxfp4Block}, true};
      }
    }
  }

  // Float32 matrices and biases (any form, native ones dequantized exactly).
  ExpertTensors read(TensorReader& r, int64_t l, int64_t e) const {
    const int64_t E = c_.num_experts, ff = c_.intermediate_size, d = c_.hidden_size;
    ExpertTensors t;
    if (form_ == Form::PerExpert) {
      t.w1 = r.read(expert_name(l, e, nm_.expert_w1), {ff, d});
      t.w3 = r.read(expert_name(l, e, nm_.expert_w3), {ff, d});
      t.w2 = r.read(expert_name(l, e, nm_.expert_w2), {d, ff});
      return t;
    }
    if (form_ == Form::Stacked) {  // [2ff, d]: the gate's rows, then the up's; down_proj[e] is w2 as it is
      const std::vector<float> gu = stacked_floats(r, l, e, "gate_up_proj", 2 * ff, d);
      t.w1.assign(gu.begin(), gu.begin() + ff * d);
      t.w3.assign(gu.begin() + ff * d, gu.end());
      t.w2 = stacked_floats(r, l, e, "down_proj", d, ff);
      return t;
    }
    std::vector<float> gate_up(static_cast<std::size_t>(2 * ff * d));  // [2ff, d]: rows alternate gate, up
    t.w2.resize(static_cast<std::size_t>(d * ff));
    if (form_ == Form::Fused) {
      const std::vector<float> gu = r.read_slice(layer_name(l, "mlp.experts.gate_up_proj"), {E, d, 2 * ff}, e);  // [d, 2ff]
      for (int64_t j = 0; j < d; ++j)
        for (int64_t i = 0; i < 2 * ff; ++i) gate_up[i * d + j] = gu[j * 2 * ff + i];
      const std::vector<float> down = r.read_slice(layer_name(l, "mlp.experts.down_proj"), {E, ff, d}, e);  // [ff, d]
      for (int64_t i = 0; i < ff; ++i)
        for (int64_t j = 0; j < d; ++j) t.w2[j * ff + i] = down[i * d + j];
    } else {
      const Mxfp4Slice gu = read_mxfp4(r, l, e, "gate_up_proj", 2 * ff, d), down = read_mxfp4(r, l, e, "down_proj", d, ff);
      dequantize_mxfp4(gu.blocks.data(), gu.scales.data(), 2 * ff, d / kMxfp4Block, gate_up.data());
      dequantize_mxfp4(down.blocks.data(), down.scales.data(), d, ff / kMxfp4Block, t.w2.data());
    }
    t.w1.resize(static_cast<std::size_t>(ff * d));
    t.w3.resize(t.w1.size());
    for (int64_t i = 0; i < ff; ++i) {
      std::copy_n(gate_up.data() + (2 * i) * d, d, t.w1.data() + i * d);
      std::copy_n(gate_up.data() + (2 * i + 1) * d, d, t.w3.data() + i * d);
    }
    t.bias = read_biases(r, l, e);
    return t;
  }

  // The expert's raw form in its native scheme, as shipped (the model's expert_format is native()).
  std::vector<unsigned char> read_raw(TensorReader& r, int64_t l, int64_t e, const model::ModelConfig& c) const {
    const int64_t ff = c_.intermediate_size, d = c_.hidden_size;
    const std::vector<io::ExpertPart> parts = io::expert_raw_parts(c);
    std::vector<unsigned char> raw(io::expert_raw_bytes(c));
    auto put = [&](const char* part, const void* src, std::size_t bytes) {
      const io::ExpertPart& p = io::expert_part(parts, part);
      if (p.bytes != bytes) fail(ErrorKind::Internal, "convert: part ", part, " is ", p.bytes, " bytes, the checkpoint's ", bytes);
      std::memcpy(raw.data() + p.offset, src, bytes);
    };
    if (form_ == Form::Stacked) {  // fp8: gate_up's first ff rows (and their block rows) are w1, the rest w3
      const TensorReader::Fp8Tensor gu = r.read_fp8_slice(stacked(l, "gate_up_proj"), {c_.num_experts, 2 * ff, d}, e);
      const TensorReader::Fp8Tensor down = r.read_fp8_slice(stacked(l, "down_proj"), {c_.num_experts, d, ff}, e);
      const std::size_t half = static_cast<std::size_t>(ff * d), scale_half = static_cast<std::size_t>(fp8_scale_rows(ff) * fp8_scale_cols(d));
      put("w1", gu.values.data(), half);
      put("w3", gu.values.data() + half, half);
      put("w1_scales", gu.scales.data(), scale_half * 4);
      put("w3_scales", gu.scales.data() + scale_half, scale_half * 4);
      put("w2", down.values.data(), down.values.size());
      put("w2_scales", down.scales.data(), down.scales.size() * 4);
      return raw;
    }
    if (form_ == Form::PerExpert) {  // fp8: the e4m3 bytes and their float32 scales; INT4: values, scales, levels
      for (auto [part, pattern, rows, cols] : {std::tuple{"w1", &nm_.expert_w1, ff, d}, std::tuple{"w3", &nm_.expert_w3, ff, d},
                                               std::tuple{"w2", &nm_.expert_w2, d, ff}}) {
        if (int4_) {
          const PackedInt4Matrix m = r.read_int4(expert_name(l, e, *pattern), {rows, cols});
          put(part, m.values.data(), m.values.size());
          put((std::string(part) + "_scales").c_str(), m.scales.data(), m.scales.size() * 2);
          put((std::string(part) + "_levels").c_str(), m.levels.data(), m.levels.size());
          continue;
        }
        const TensorReader::Fp8Tensor t = r.read_fp8(expert_name(l, e, *pattern), {rows, cols});
        put(part, t.values.data(), t.values.size());
        put((std::string(part) + "_scales").c_str(), t.scales.data(), t.scales.size() * 4);
      }
      return raw;
    }
    // MXFP4: gate_up's even rows are w1, odd rows w3 (blocks and scales alike); down_proj is w2.
    const Mxfp4Slice gu = read_mxfp4(r, l, e, "gate_up_proj", 2 * ff, d), down = read_mxfp4(r, l, e, "down_proj", d, ff);
    const std::size_t row_bytes = static_cast<std::size_t>(d / 2), row_scales = static_cast<std::size_t>(d / kMxfp4Block);
    std::vector<unsigned char> blocks[2], scales[2];
    for (int h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < ff; ++i) {
        const auto* b = gu.blocks.data() + static_cast<std::size_t>(2 * i + h) * row_bytes;
        const auto* s = gu.scales.data() + static_cast<std::size_t>(2 * i + h) * row_scales;
        blocks[h].insert(blocks[h].end(), b, b + row_bytes);
        scales[h].insert(scales[h].end(), s, s + row_scales);
      }
    }
    put("w1", blocks[0].data(), blocks[0].size());
    put("w1_scales", scales[0].data(), scales[0].size());
    put("w3", blocks[1].data(), blocks[1].size());
    put("w3_scales", scales[1].data(), scales[1].size());
    put("w2", down.blocks.data(), down.blocks.size());
    put("w2_scales", down.scales.data(), down.scales.size());
    store_biases(read_biases(r, l, e), c.dtype, raw.data() + io::expert_part(parts, "b1").offset);
    return raw;
  }

  void skip(TensorReader& r, int64_t l, int64_t e) const {
    if (form_ == Form::PerExpert) {
      for (const std::string* p : {&nm_.expert_w1, &nm_.expert_w3, &nm_.expert_w2}) r.skip(expert_name(l, e, *p));
      return;
    }
    if (form_ == Form::Stacked) {
      for (const char* n : {"gate_up_proj", "down_proj"}) r.skip(stacked(l, n), true);
      return;
    }
    std::vector<std::string> names{"gate_up_proj_bias", "down_proj_bias"};
    if (form_ == Form::Fused) names.insert(names.end(), {"gate_up_proj", "down_proj"});
    else names.insert(names.end(), {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"});
    for (const auto& n : names) r.skip(layer_name(l, "mlp.experts." + n), true);
  }

 private:
  // One expert's slice of a stacked matrix [rows, cols] as floats: fp8 dequantized with its block scales.
  std::vector<float> stacked_floats(TensorReader& r, int64_t l, int64_t e, const char* which, int64_t rows, int64_t cols) const {
    if (!fp8_) return r.read_slice(stacked(l, which), {c_.num_experts, rows, cols}, e);
    const TensorReader::Fp8Tensor t = r.read_fp8_slice(stacked(l, which), {c_.num_experts, rows, cols}, e);
    std::vector<float> v(t.values.size());
    dequantize_fp8_block(t.values.data(), t.scales.data(), cols, 0, rows, v.data());
    return v;
  }
  // Whether every expert matrix is there with this dtype.
  bool all_experts(const HfCheckpoint& ckpt, const std::string& dtype) const {
    for (int64_t l = 0; l < c_.num_layers; ++l)
      for (int64_t e = 0; c_.is_moe_layer(l) && e < c_.num_experts; ++e)
        for (const std::string* p : {&nm_.expert_w1, &nm_.expert_w3, &nm_.expert_w2}) {
          const std::string n = expert_name(l, e, *p);
          if (!ckpt.has(n) || ckpt.info(n).dtype != dtype) return false;
        }
    return true;
  }
  int64_t first_moe_layer() const {
    int64_t l = 0;
    while (l + 1 < c_.num_layers && !c_.is_moe_layer(l)) ++l;
    return l;
  }
  // A stacked tensor of layer l under the module that holds the experts (stacked_prefix_).
  std::string stacked(int64_t l, const std::string& what) const { return layer_name(l, stacked_prefix_ + what); }
  // Whether the checkpoint stacks its experts (no per-expert tensor where the names put expert 0, a
  // gate_up_proj under the per-expert names' module or mlp.experts.); sets stacked_prefix_.
  bool stacked_module(const HfCheckpoint& ckpt) {
    const int64_t l = first_moe_layer();
    if (ckpt.has(expert_name(l, 0, nm_.expert_w1))) return false;
    const std::string own = nm_.expert_w1.substr(0, nm_.expert_w1.find("{e}"));  // "block_sparse_moe.experts."
    for (const std::string& prefix : {own, std::string("mlp.experts.")})
      if (ckpt.has(layer_name(l, prefix + "gate_up_proj"))) {
        stacked_prefix_ = prefix;
        return true;
      }
    return false;
  }

  // One expert's MXFP4 matrix [rows, cols] as shipped, its scales scanned (255 is NaN).
  struct Mxfp4Slice {
    std::vector<unsigned char> blocks, scales;
  };
  Mxfp4Slice read_mxfp4(TensorReader& r, int64_t l, int64_t e, const std::string& which, int64_t rows, int64_t cols) const {
    const int64_t E = c_.num_experts, groups = cols / kMxfp4Block;
    const std::string scales_name = layer_name(l, "mlp.experts." + which + "_scales");
    Mxfp4Slice m{r.read_bytes_slice(layer_name(l, "mlp.experts." + which + "_blocks"), {E, rows, groups, kMxfp4BlockBytes}, e),
                 r.read_bytes_slice(scales_name, {E, rows, groups}, e)};
    for (std::size_t i = 0; i < m.scales.size(); ++i)
      if (m.scales[i] == kE8m0Nan)
        fail(ErrorKind::BadInput, r.file_of(scales_name), ": tensor ", scales_name, "[", e, "] contains an E8M0 scale of 255 (NaN) at [",
             static_cast<int64_t>(i) / groups, ",", static_cast<int64_t>(i) % groups, "]");
    return m;
  }
  // gpt-oss's biases as b1‖b3‖b2: gate_up_proj_bias alternates gate and up.
  std::vector<float> read_biases(TensorReader& r, int64_t l, int64_t e) const {
    const int64_t E = c_.num_experts, ff = c_.intermediate_size, d = c_.hidden_size;
    const std::vector<float> gub = r.read_slice(layer_name(l, "mlp.experts.gate_up_proj_bias"), {E, 2 * ff}, e);
    const std::vector<float> db = r.read_slice(layer_name(l, "mlp.experts.down_proj_bias"), {E, d}, e);
    std::vector<float> bias(static_cast<std::size_t>(2 * ff + d));
    for (int64_t i = 0; i < ff; ++i) {
      bias[i] = gub[2 * i];
      bias[ff + i] = gub[2 * i + 1];
    }
    std::copy(db.begin(), db.end(), bias.begin() + 2 * ff);
    return bias;
  }

  model::ModelConfig c_;
  const model::NameMap& nm_;
  std::string stacked_prefix_;
  Form form_ = Form::PerExpert;
  bool fp8_ = false, int4_ = false;
};

// Was `path` written by a conversion of exactly this input (its converted_from attribute)?
bool finished_before(const std::string& path, const std::string& fingerprint) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    io::H5Handle f = io::h5_open_file(path, io::H5Mode::ReadOnly);
    const auto v = io::h5_attr_string(f, "converted_from");
    return v && *v == fingerprint;
  } catch (const Error&) {
    return false;  // unreadable (e.g. cut short): made again
  }
}

}  // namespace

void ConvertConfig::validate() const {
  if (from.empty()) fail(ErrorKind::Usage, "--from-hf is required");
  if (out.empty()) fail(ErrorKind::Usage, "--out is required");
  if (io::is_s3_url(out)) io::parse_s3_url(out);
  else if (!staging.empty()) fail(ErrorKind::Usage, "--staging goes with an s3:// --out");
  if (dtype != "keep" && dtype != "float32" && dtype != "bfloat16")
    fail(ErrorKind::Usage, "--dtype must be keep, float32 or bfloat16, not \"", dtype, "\"");
  if (shards < 0 || shards > 100000) fail(ErrorKind::Usage, "--shards must be in [0, 100000] (0: about 2 GiB each)");
  const auto scheme = weight_scheme_by_name(quantize);
  if (quantize != "keep" && quantize != "none" && !(scheme && weight_scheme_row(*scheme).convert_quantizable))
    fail(ErrorKind::Usage, "--quantize must be keep, none, ", weight_scheme_names([](const WeightSchemeRow& r) { return r.convert_quantizable; }),
         ", not \"", quantize, "\"");
}

namespace {

// RoPE scaling: `rope_scaling` (transformers 4.x) or `rope_parameters` (5.x, which also carries
// rope_theta); the type in "rope_type" or the older "type".
void read_rope(const model::HfConfig& h, model::ModelConfig& c) {
  const char* key = h.has("rope_parameters") ? "rope_parameters" : h.has("rope_scaling") ? "rope_scaling" : nullptr;
  if (!key) return;
  const json& r = h.j[key];
  const std::string where = h.where + ": field " + key;
  if (!r.is_object()) fail(ErrorKind::BadInput, where, " is not an object");
  const model::HfConfig p{r, where};
  if (p.has("rope_theta")) c.rope_theta = p.number_or("rope_theta", c.rope_theta);
  const char* type_key = p.has("rope_type") ? "rope_type" : "type";
  if (!p.has(type_key)) {
    if (std::string(key) == "rope_parameters") return;  // the theta alone
    fail(ErrorKind::BadInput, where, " has no rope_type");
  }
  if (!r[type_key].is_string()) fail(ErrorKind::BadInput, where, ".", type_key, " is not a string");
  const std::string type = r[type_key].get<std::string>();
  if (type == "default") return;
  if (type == "dynamic")
    fail(ErrorKind::BadInput, where, ".rope_type is dynamic: not supported (its frequencies change with the batch's length)");
  c.rope.type = model::parse_rope_type(type, where + ".rope_type");
  c.rope.factor = p.number_or("factor", 1.0);
  c.rope.original_max_position = p.integer_or("original_max_position_embeddings", c.max_position);
  if (c.rope.type == model::RopeType::Yarn) {
    c.rope.beta_fast = p.number_or("beta_fast", 32.0);
    c.rope.beta_slow = p.number_or("beta_slow", 1.0);
    c.rope.attention_factor = p.number_or("attention_factor", 0.0);
    c.rope.mscale = p.number_or("mscale", 0.0);
    c.rope.mscale_all_dim = p.number_or("mscale_all_dim", 0.0);
    c.rope.truncate = p.flag_or("truncate", true);
    if (!p.has("factor")) c.rope.factor = static_cast<double>(c.max_position) / static_cast<double>(c.rope.original_max_position);
  }
  if (c.rope.type == model::RopeType::Llama3) {
    c.rope.low_freq_factor = p.number_or("low_freq_factor", 1.0);
    c.rope.high_freq_factor = p.number_or("high_freq_factor", 4.0);
  }
}

}  // namespace

// DeepSeek lays each RoPE part out as interleaved pairs (x0, x1), (x2, x3)...; moe-hdf5 in
// rotate_half order (the evens, then the odds). Both rotate the same pairs by the same
// frequencies, and q and k are permuted alike, so every score is unchanged. Rows of `w` [rows, cols]:
// the RoPE rows of each head of q (wq, wq_b) or the shared RoPE key's rows of wkv_a.
bool rope_interleaved(const std::string& config_text, const model::ModelConfig& c) {
  const model::ModelFamily* f = model::find_model_family(c.architecture);
  const json j = json::parse(config_text, nullptr, false);
  return f && f->rope_interleaved && j.is_object() && f->rope_interleaved(model::HfConfig{j, "config.json"});
}
void deinterleave_rope(const model::DenseDataset& ds, const model::ModelConfig& c, std::vector<float>& w) {
  const model::MlaShape& m = c.mla;
  std::vector<int64_t> first_rows;  // where each RoPE part starts
  if (ds.name == "wq" || ds.name == "wq_b")
    for (int64_t h = 0; h < c.num_heads; ++h) first_rows.push_back(h * c.head_dim + m.qk_nope_head_dim);
  else if (ds.name == "wkv_a")
    first_rows.push_back(m.kv_lora_rank);
  // GLM-5's indexer: each index head's first qk_rope_head_dim rows of wq_b, the key's of wk, and of
  // the key's LayerNorm (permuted alike, it normalises the same values).
  const model::ModelFamily* f = model::find_model_family(c.architecture);
  if (f && f->indexer_rope_interleaved) {
    if (ds.name == "indexer/wq_b")
      for (int64_t h = 0; h < c.dsa.index_heads; ++h) first_rows.push_back(h * c.dsa.index_head_dim);
    else if (ds.name == "indexer/wk" || ds.name == "indexer/k_norm" || ds.name == "indexer/k_norm_bias")
      first_rows.push_back(0);
  }
  // Only these hold RoPE rows; the other norms may be one-dimensional.
  if (first_rows.empty()) return;
  if (ds.shape.size() != 2 && ds.shape.size() != 1) fail(ErrorKind::Internal, "deinterleave_rope: ", ds.name, " is not a matrix or a vector");
  const int64_t cols = ds.shape.size() == 2 ? ds.shape[1] : 1, rope = m.qk_rope_head_dim;
  std::vector<float> part(static_cast<std::size_t>(rope * cols));
  for (int64_t r0 : first_rows) {
    for (int64_t i = 0; i < rope; ++i) {
      const int64_t from = i < rope / 2 ? 2 * i : 2 * (i - rope / 2) + 1;
      std::copy_n(w.data() + (r0 + from) * cols, cols, part.data() + i * cols);
    }
    std::copy(part.begin(), part.end(), w.begin() + r0 * cols);
  }
}

// A tensor of the layers past num_hidden_layers the family does not convert (DeepSeek-V3's
// multi-token prediction: model.layers.L.* for L from num_hidden_layers on).
bool is_mtp_tensor(const std::string& name, const std::string& config_text, const model::ModelConfig& c) {
  static const std::string prefix = "model.layers.";
  const model::ModelFamily* f = model::find_model_family(c.architecture);
  if (f && std::any_of(f->unconverted_prefixes.begin(), f->unconverted_prefixes.end(), [&](const std::string& p) { return name.starts_with(p); }))
    return true;
  if (!f || !f->unconverted_layers || name.rfind(prefix, 0) != 0) return false;
  const json j = json::parse(config_text, nullptr, false);
  const int64_t mtp = j.is_object() ? f->unconverted_layers(model::HfConfig{j, "config.json"}) : 0;
  const std::size_t dot = name.find('.', prefix.size());
  if (mtp <= 0 || dot == std::string::npos) return false;
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
  const int64_t l = std::stoll(digits);
  return l >= c.num_layers && l < c.num_layers + mtp;
}

model::ModelConfig model_config_from_hf(const std::string& text, const std::string& where, DType dtype, std::string* notes,
                                 const std::string& generation_text) {
  json j = io::parse_json(text_model_config(text, where), where);
  json gen = json::parse(generation_text.empty() ? "{}" : generation_text, nullptr, false);
  const json* generation = gen.is_discarded() ? nullptr : &gen;
  if (!j.is_object()) fail(ErrorKind::BadInput, where, ": not a JSON object");
  const model::HfConfig h{j, where};
  if (!h.has("model_type") || !j["model_type"].is_string()) fail(ErrorKind::BadInput, where, ": field model_type is missing");
  const std::string type = j["model_type"].get<std::string>();
  const model::ModelFamily* family = model::find_model_family(type);
  if (!family)
    fail(ErrorKind::BadInput, where, ": model_type \"", type, "\" is not supported; supported: ", model::supported_architectures());
  auto note = [&](const std::string& s) {
    if (notes) *notes += s + "\n";
  };
  model::ModelConfig c;
  c.architecture = family->name;
  c.vocab_size = h.integer("vocab_size");
  c.hidden_size = h.integer("hidden_size");
  c.num_layers = h.integer("num_hidden_layers");
  c.num_heads = h.integer("num_attention_heads");
  c.num_kv_heads = h.integer_or("num_key_value_heads", c.num_heads);
  if (c.num_heads <= 0) fail(ErrorKind::BadInput, where, ": field num_attention_heads must be > 0");
  c.head_dim = h.integer_or("head_dim", c.hidden_size / c.num_heads);
  c.max_position = h.integer("max_position_embeddings");
  c.rope_theta = h.number_or("rope_theta", family->rope_theta);
  c.rms_norm_eps = h.number_or("rms_norm_eps", 1e-6);
  c.dtype = dtype;
  read_rope(h, c);
  if (h.has("hidden_act") && j["hidden_act"] != "silu")
    fail(ErrorKind::BadInput, where, ": field hidden_act is ", j["hidden_act"].dump(), "; the experts are SwiGLU (silu)");
  c.top_k = h.integer("num_experts_per_tok");
  family->from_hf(h, c, note);
  c.bos_token_id = h.token_id("bos_token_id").value_or(0);
  // The end tokens: config.json's eos_token_id, and every one generation_config.json lists (what
  // transformers' generate stops at).
  std::vector<int64_t> ends = h.token_ids("eos_token_id");
  if (generation && generation->is_object())
    for (int64_t t : model::HfConfig{*generation, "generation_config.json"}.token_ids("eos_token_id"))
      if (std::find(ends.begin(), ends.end(), t) == ends.end()) ends.push_back(t);
  if (ends.empty()) fail(ErrorKind::BadInput, where, ": field eos_token_id is missing, here and in generation_config.json (generation needs an end token)");
  c.eos_token_id = ends.front();
  c.extra_eos_token_ids.assign(ends.begin() + 1, ends.end());
  if (!h.has("eos_token_id")) note("eos_token_id from generation_config.json");
  if (ends.size() > 1) note("end tokens " + [&] {
    std::string s;
    for (int64_t t : ends) s += (s.empty() ? "" : ", ") + std::to_string(t);
    return s;
  }() + " (config.json and generation_config.json)");
  if (h.has("bos_token_id") && j["bos_token_id"].is_array()) note("bos_token_id is a list: the first is used");
  try {
    c.validate(where);
  } catch (const Error& e) {
    throw model::with_hf_field_names(e, j);  // the user wrote config.json's names, not moe-hdf5's
  }
  return c;
}

namespace {

// Sends a converted directory to an object-store prefix: shards first, model.h5 last (so a reader
// never finds a model.h5 whose experts are missing), each file skipped when the object is there
// with the same size and xxh64.
void upload_model(const std::string& local, const std::string& out, const io::S3Config& s3, int shards, ConvertReport& rep) {
  const io::ObjectStore store(s3);
  const io::S3Url prefix = io::parse_s3_url(out);
  std::vector<std::string> files;
  for (int s = 0; s < shards; ++s) files.push_back(io::shard_file_name(s));
  for (const char* name : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"})
    if (fs::exists(fs::path(local) / name)) files.push_back(name);
  files.push_back("model.h5");
  // Shards of an earlier conversion with more shards would make experts appear twice: removed.
  static const std::regex pat(R"(experts-(\d+)\.h5)");
  const std::string lead = prefix.key.empty() ? "" : prefix.key + "/";
  for (const io::ObjectInfo& o : store.list(prefix)) {
    const std::string name = o.key.substr(lead.size());
    std::smatch m;
    if (std::regex_match(name, m, pat) && std::stoll(m[1].str()) >= shards) {
      store.remove(prefix.child(name));
      rep.notes += "removed " + prefix.child(name).str() + " (from an earlier conversion with more shards)\n";
    }
  }
  for (const auto& name : files) {
    const std::string path = (fs::path(local) / name).string();
    const std::string sum = hex(file_xxh64(path));
    const auto there = store.head(prefix.child(name));
    if (there && there->size == fs::file_size(path) && there->metadata.count("moerun-xxh64") && there->metadata.at("moerun-xxh64") == sum) {
      ++rep.uploads_kept;
      continue;
    }
    store.put_file(prefix.child(name), path, {{"moerun-xxh64", sum}});
    ++rep.files_uploaded;
  }
}

ConvertReport convert_local(const ConvertConfig& cfg, const HfCheckpoint& ckpt, const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace

ConvertReport convert_hf_checkpoint(const ConvertConfig& cfg, const std::function<void(uint64_t, uint64_t)>& progress) {
  cfg.validate();
  const HfCheckpoint ckpt(cfg.from);
  if (!io::is_s3_url(cfg.out)) return convert_local(cfg, ckpt, progress);
  ConvertConfig local = cfg;
  const bool own_staging = cfg.staging.empty();
  // Kept across a killed run (its finished files are reused), so it must be ours alone: under
  // this user's private temp directory, or a --staging directory checked the same way.
  if (own_staging) {
    local.out = (fs::path(io::user_temp_directory()) / ("convert-" + hex(ckpt.fingerprint()))).string();
    io::make_private_directory(local.out);
  } else {
    std::error_code ec;
    if (fs::exists(cfg.staging, ec)) io::check_private_directory(cfg.staging, "--staging");
    local.out = cfg.staging;
  }
  io::ObjectStore(cfg.s3);  // credentials and endpoint checked before hours of conversion
  ConvertReport rep = convert_local(local, ckpt, progress);
  upload_model(local.out, cfg.out, cfg.s3, rep.shards, rep);
  std::error_code ec;
  if (own_staging) fs::remove_all(local.out, ec);
  return rep;
}

// quantization_config of an fp8 checkpoint: block-wise e4m3 with 128 x 128 blocks is what is read
// (a per-tensor or other block size would need other scales); of a compressed-tensors one, INT4
// pack-quantized groups (convert/compressed_tensors.hpp).
void check_quantization_config(const std::string& config_json, const std::string& config_path) {
  check_quantization_config_type(config_json, config_path);
  const json j = json::parse(config_json, nullptr, false);
  if (!j.is_object() || !j.contains("quantization_config") || !j["quantization_config"].is_object()) return;
  const json& q = j["quantization_config"];
  const std::string where = config_path + ": field quantization_config";
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"].get<std::string>() : "";
  if (method == "mxfp4") return;  // gpt-oss: the blocks and scales say it all
  if (read_packed_int4_scheme(q, where)) return;
  if (method != "fp8")
    fail(ErrorKind::BadInput, where, ".quant_method is \"", method,
         "\"; supported: fp8 (128 x 128 blocks), mxfp4 and compressed-tensors (INT4 pack-quantized)");
  if (q.contains("fmt") && q["fmt"] != "e4m3") fail(ErrorKind::BadInput, where, ".fmt is ", q["fmt"].dump(), ", expected e4m3");
  if (!q.contains("weight_block_size") || q["weight_block_size"] != json::array({kFp8Block, kFp8Block}))
    fail(ErrorKind::BadInput, where, ".weight_block_size is ", q.contains("weight_block_size") ? q["weight_block_size"].dump() : "missing",
         ", expected [128, 128]");
}

WeightScheme shipped_expert_scheme(const std::string& config_json) {
  const json j = json::parse(config_json, nullptr, false);
  if (!j.is_object() || !j.contains("quantization_config") || !j["quantization_config"].is_object()) return WeightScheme::Plain;
  const json& q = j["quantization_config"];
  if (q.contains("quant_method") && q["quant_method"] == "mxfp4") return WeightScheme::Mxfp4;
  if (const auto int4 = read_packed_int4_scheme(q, "quantization_config")) {
    // INT4 when the scheme covers the family's expert linears (the last layer's first expert's w1,
    // as convert names it: every family's last layer is a MoE one).
    const std::string type = j.value("model_type", std::string());
    const int64_t layers = j.value("num_hidden_layers", int64_t{1});
    std::string w1 = model::names_for(model::find_model_family(type) ? model::find_model_family(type)->name : type).expert_w1;
    w1.replace(w1.find("{e}"), 3, "0");
    const std::string module = layer_name(layers - 1, w1.substr(0, w1.size() - std::strlen(".weight")));
    return int4->covers(module) ? WeightScheme::Int4 : WeightScheme::Plain;
  }
  const bool fp8 = q.contains("quant_method") && q["quant_method"] == "fp8" && q.contains("weight_block_size") &&
                   q["weight_block_size"] == json::array({kFp8Block, kFp8Block});
  return fp8 ? WeightScheme::Fp8Block : WeightScheme::Plain;
}

namespace {

// An fp8 weight's scales: "X.weight_scale_inv", float32 (or bf16/f16) [ceil(rows/128), ceil(cols/128)]
// (stacked experts [E, rows, cols]: [E, ceil(rows/128), ceil(cols/128)]).
void expect_fp8_scales(const HfCheckpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape) {
  const std::string sname = name + kFp8ScaleSuffix;
  if (!ckpt.has(sname))
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " is F8_E4M3 but the checkpoint has no ", ckpt.spelled(sname), " (its block scales)");
  const SafetensorInfo& si = ckpt.info(sname);
  const std::size_t n = shape.size();
  std::vector<int64_t> want(shape.begin(), shape.end() - 2);
  want.insert(want.end(), {fp8_scale_rows(shape[n - 2]), fp8_scale_cols(shape[n - 1])});
  if (si.shape != want)
    fail(ErrorKind::BadInput, ckpt.file_of(sname), ": tensor ", ckpt.spelled(sname), " has shape ", io::shape_str(si.shape), ", expected ", io::shape_str(want),
         " (128 x 128 blocks of ", io::shape_str(shape), ")");
  if (si.dtype != "F32" && si.dtype != "BF16" && si.dtype != "F16")
    fail(ErrorKind::BadInput, ckpt.file_of(sname), ": tensor ", ckpt.spelled(sname), " has dtype ", si.dtype, ", expected F32, BF16 or F16");
}

// The experts' stored format: --quantize keep takes the checkpoint's native form (MXFP4, fp8) when
// it has one and the shapes allow it, none dequantizes, q8/q4 quantize. Notes say which.
void choose_expert_format(const ConvertConfig& cfg, WeightScheme native, const std::string& where, model::ModelConfig& c, std::string& notes) {
  const std::string dense = dtype_name(c.dtype);
  const char* shipped = native == WeightScheme::Mxfp4  ? "MXFP4"
                        : native == WeightScheme::Int4 ? "INT4 (compressed-tensors pack-quantized)"
                                                       : "fp8 (e4m3, 128 x 128 block scales)";
  if (cfg.quantize == "none" || (cfg.quantize == "keep" && native == WeightScheme::Plain)) {
    if (native != WeightScheme::Plain) notes += std::string("experts: ") + shipped + " dequantized to " + dense + " (--quantize none)\n";
    return;
  }
  const model::WeightFormat want = cfg.quantize == "keep" ? model::WeightFormat{c.dtype, native} : model::parse_weight_format(cfg.quantize, c.dtype, "--quantize");
  const model::WeightFormat before = c.expert_format;
  c.expert_format = want;
  try {
    c.validate(where);
  } catch (const Error& e) {
    if (cfg.quantize != "keep") throw Error(ErrorKind::Usage, std::string("--quantize: ") + e.what());
    c.expert_format = before;  // kept only where the kernels take the shapes
    notes += std::string("experts: ") + shipped + " dequantized to " + dense + ": " + e.what() + "\n";
    return;
  }
  if (cfg.quantize == "keep") notes += std::string("experts: kept as shipped, ") + shipped + "; dense layers " + dense + "\n";
  else notes += "experts quantized to " + cfg.quantize + (cfg.quantize == "int4" ? " (groups of 32, bf16 scales)" : " (groups of 32, fp16 scales)") +
                (native != WeightScheme::Plain ? std::string(" from ") + shipped + " dequantized" : "") + "; dense layers stay " + dense + "\n";
}

// The dtype: keep bf16 as bf16; f32 and f16 (which bf16 would round) become f32. An fp8
// checkpoint's e4m3 weights and their float32 scales do not count: its other tensors decide.
DType stored_dtype(const ConvertConfig& cfg, const HfCheckpoint& ckpt) {
  if (cfg.dtype == "bfloat16") return DType::BF16;
  if (cfg.dtype != "keep") return DType::F32;
  bool all_bf16 = true;
  for (const auto& n : ckpt.names()) {
    const std::string& t = ckpt.info(n).dtype;
    std::string weight;
    const bool fp8_part = t == "F8_E4M3" || (n.size() > 10 && n.ends_with(kFp8ScaleSuffix) && ckpt.has(n.substr(0, n.size() - 10))) ||
                          t == "INT4" || (is_packed_int4_part(n, &weight) && ckpt.has(weight) && ckpt.info(weight).dtype == "INT4");
    const bool kept_f32 = n.ends_with("e_score_correction_bias");  // float32 in the file whatever the dtype
    all_bf16 = all_bf16 && (t == "BF16" || fp8_part || kept_f32);
  }
  return all_bf16 ? DType::BF16 : DType::F32;
}

// One conversion's plan: the config, the checkpoint's names for it, the shards, and each dataset
// of model.h5 with the checkpoint tensor it comes from.
struct ConversionPlan {
  model::ModelConfig c;
  model::NameMap nm;
  bool tied = false;   // tie_word_embeddings: lm_head is embed_tokens
  int shards = 0;
  std::string generation;   // generation_config.json's text, or empty
  std::string fingerprint;  // what every output file is made from
  std::vector<int64_t> moe_layers;  // the decoder layer of each row of the expert tables
  std::vector<model::DenseDataset> ours;
  std::vector<std::pair<std::string, std::vector<int64_t>>> dense;  // per dataset: HF name and shape
  std::vector<std::vector<int64_t>> rows;  // of the HF tensor, per dataset (empty: all, as they are)
  int64_t decoder_layer(int64_t slot) const { return moe_layers[static_cast<std::size_t>(slot / c.num_experts)]; }
};

int shard_count(const ConvertConfig& cfg, const model::ModelConfig& c) {
  const int64_t total = c.num_expert_slots();
  const int shards = cfg.shards > 0 ? cfg.shards
                                    : static_cast<int>(std::clamp<int64_t>((total * c.bytes_per_expert() + (int64_t{2} << 30) - 1) >> 31, 1,
                                                                           std::min<int64_t>(total, 100000)));
  if (shards > total) fail(ErrorKind::Usage, "--shards ", shards, " is more than the model's ", total, " experts");
  return shards;
}

// Each dataset's source in the checkpoint: the family's (a fused tensor's rows) or the name map's.
void plan_dense(ConversionPlan& p) {
  const model::ModelFamily* family = model::find_model_family(p.c.architecture);
  for (const model::DenseDataset& ds : model::dense_datasets(p.c)) {
    model::DenseSource src;
    if (family && family->dense_source && family->dense_source(ds, p.c, src)) {
      p.dense.emplace_back(src.tensor, src.shape);
      p.rows.push_back(std::move(src.rows));
    } else {
      p.dense.emplace_back(p.nm.dense_name(ds, p.tied), ds.shape);
      p.rows.emplace_back();
    }
    p.ours.push_back(ds);
  }
}

ConversionPlan plan_conversion(const ConvertConfig& cfg, const HfCheckpoint& ckpt, ConvertReport& rep) {
  ConversionPlan p;
  const DType dtype = stored_dtype(cfg, ckpt);
  if (const std::string g = (fs::path(cfg.from) / "generation_config.json").string(); io::check_regular_file(g))
    p.generation = io::read_regular_file(g);
  p.c = model_config_from_hf(ckpt.config_text(), ckpt.config_path(), dtype, &rep.notes, p.generation);
  check_quantization_config(ckpt.config_text(), ckpt.config_path());
  check_int4_tensors(ckpt);
  p.nm = model::names_for(p.c.architecture);
  const json j = json::parse(ckpt.config_text(), nullptr, false);
  p.tied = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() && j["tie_word_embeddings"].get<bool>();
  return p;
}

// The plan's parts that depend on the experts' format (chosen between plan_conversion and this).
void finish_plan(ConversionPlan& p, const HfCheckpoint& ckpt, const ConvertConfig& cfg) {
  for (int64_t l = 0; l < p.c.num_layers; ++l)
    if (p.c.is_moe_layer(l)) p.moe_layers.push_back(l);
  p.shards = shard_count(cfg, p.c);
  p.fingerprint = hex(Xxh64()
                          .value(ckpt.fingerprint())
                          .text(p.generation)
                          .value(static_cast<int>(p.c.dtype))
                          .value(p.shards)
                          .text("moe-hdf5 v5")
                          .text(p.c.expert_format.name())
                          .digest());
  plan_dense(p);
}

// The tokenizer and generation settings a model directory carries, copied as they are.
constexpr const char* kTokenizerFiles[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "generation_config.json", "chat_template.jinja"};

// The output directory, writable, without what a killed run left (its temp files; the files it
// finished stay and are checked later) or shards of an earlier conversion with more shards (which
// would make experts appear twice).
void prepare_output(const std::string& out, const std::string& from, int shards, ConvertReport& rep) {
  std::error_code ec;
  // No file convert writes may be a file of the checkpoint it reads (the same directory, or a hard
  // link); a symlink at an output's name is replaced, never written through (io/output_file.hpp).
  std::vector<io::PathUse> inputs, outputs;
  for (const auto& e : fs::directory_iterator(from, ec)) inputs.push_back({e.path().string(), "--from"});
  for (int s = 0; s < shards; ++s) outputs.push_back({(fs::path(out) / io::shard_file_name(s)).string(), "--out"});
  outputs.push_back({io::model_h5_path(out), "--out"});
  for (const char* name : kTokenizerFiles) outputs.push_back({(fs::path(out) / name).string(), "--out"});
  if (fs::equivalent(out, from, ec)) fail(ErrorKind::Usage, "--out ", out, " is the --from checkpoint directory; writing it would change the input");
  io::check_distinct_paths(inputs, outputs);
  fs::create_directories(out, ec);
  if (ec) fail(ErrorKind::Io, out, ": cannot create directory: ", ec.message());
  if (::access(out.c_str(), W_OK) != 0) fail(ErrorKind::Io, out, ": directory is not writable");
  for (int s = 0; s < shards; ++s) io::remove_stale_temp_files((fs::path(out) / io::shard_file_name(s)).string());
  io::remove_stale_temp_files(io::model_h5_path(out));
  for (const auto& e : fs::directory_iterator(out, ec)) {
    static const std::regex pat(R"(experts-(\d+)\.h5)");
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pat) && std::stoll(m[1].str()) >= shards) {
      fs::remove(e.path(), ec);
      rep.notes += "removed " + name + " (from an earlier conversion with more shards)\n";
    }
  }
}

// One tensor the plan expects: present, of its shape, of a dtype convert reads.
void check_tensor(const ConvertConfig& cfg, const HfCheckpoint& ckpt, const model::ModelConfig& c, const std::string& name,
                  const ExpectedTensor& want) {
  const std::vector<int64_t>& shape = want.shape;
  if (!ckpt.has(name))
    fail(ErrorKind::BadInput, cfg.from, ": the checkpoint has no tensor ", ckpt.spelled(name), ", which config.json implies (", c.architecture, ", ",
         c.num_layers, " layers, ", c.num_experts, " experts)");
  const SafetensorInfo& info = ckpt.info(name);
  if (info.shape != shape)
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " has shape ", io::shape_str(info.shape), ", config.json says ",
         io::shape_str(shape));
  if (want.bytes && info.dtype != "U8")
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " has dtype ", info.dtype, ", expected U8 (MXFP4)");
  if (!want.bytes && info.dtype == "F8_E4M3" && (shape.size() == 2 || shape.size() == 3)) return expect_fp8_scales(ckpt, name, shape);
  if (!want.bytes && info.dtype == "INT4" && shape.size() == 2) return check_packed_int4(ckpt, name, shape[0], shape[1]);
  if (!want.bytes && info.dtype != "F32" && info.dtype != "BF16" && info.dtype != "F16")
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " has dtype ", info.dtype, ", expected F32, BF16 or F16",
         shape.size() == 2 ? " (or F8_E4M3 with block scales, or packed INT4)" : "");
}

// A Qwen2-MoE/Qwen3-Next/Qwen3.5 checkpoint saved by transformers with shared_expert_intermediate_size
// 0 still holds its shared expert: zero-element matrices and a gate that scales their zero output.
bool empty_shared_expert(const std::string& n, const SafetensorInfo& info, const model::ModelConfig& c) {
  if (c.shared_expert_intermediate_size != 0 || n.find(".mlp.shared_expert") == std::string::npos) return false;
  return n.ends_with(".mlp.shared_expert_gate.weight") || info.elements() == 0;
}

// Before anything is written: every tensor the config implies is there with its shape, and the
// checkpoint holds nothing else (more layers or experts than config.json says). Names the file and
// the tensor.
void check_checkpoint(const ConvertConfig& cfg, const HfCheckpoint& ckpt, const ConversionPlan& p, const CheckpointExperts& experts) {
  const model::ModelConfig& c = p.c;
  if (experts.form() == CheckpointExperts::Form::Mxfp4 && (c.hidden_size % kMxfp4Block != 0 || c.intermediate_size % kMxfp4Block != 0))
    fail(ErrorKind::BadInput, ckpt.config_path(), ": hidden_size ", c.hidden_size, " and intermediate_size ", c.intermediate_size,
         " must be multiples of 32 for MXFP4 experts");
  std::map<std::string, ExpectedTensor> expected;
  for (const auto& [hf, shape] : p.dense) expected[hf] = {shape};
  experts.expect(expected);
  for (const auto& [name, want] : expected) check_tensor(cfg, ckpt, c, name, want);
  const std::size_t suffix = std::strlen(kFp8ScaleSuffix);
  for (const auto& n : ckpt.names()) {
    if (is_mtp_tensor(n, ckpt.config_text(), c)) continue;  // not converted (a note says so)
    const bool fp8_scales = n.ends_with(kFp8ScaleSuffix) && expected.count(n.substr(0, n.size() - suffix)) &&
                            ckpt.info(n.substr(0, n.size() - suffix)).dtype == "F8_E4M3";
    std::string weight;
    const bool int4_part = is_packed_int4_part(n, &weight) && expected.count(weight) && ckpt.info(weight).dtype == "INT4";
    if (expected.count(n) || fp8_scales || int4_part || n.find("rotary_emb.inv_freq") != std::string::npos || (p.tied && n == "lm_head.weight") ||
        empty_shared_expert(n, ckpt.info(n), c))
      continue;
    fail(ErrorKind::BadInput, ckpt.file_of(n), ": tensor ", ckpt.spelled(n), " has no place in a ", c.architecture, " model as config.json describes it (",
         c.num_layers, " layers, ", c.num_experts, " experts)");
  }
}

// The tensor bytes the conversion reads (for progress): all but a tied LM head and MTP layers.
uint64_t bytes_to_read(const HfCheckpoint& ckpt, const ConversionPlan& p) {
  uint64_t total = ckpt.total_bytes();
  if (p.tied && ckpt.has("lm_head.weight")) total -= ckpt.info("lm_head.weight").end - ckpt.info("lm_head.weight").begin;
  for (const auto& n : ckpt.names())  // a packed INT4 weight's bytes are its parts' (counted as they are)
    if (is_mtp_tensor(n, ckpt.config_text(), p.c) && ckpt.info(n).dtype != "INT4") total -= ckpt.info(n).end - ckpt.info(n).begin;
  return total;
}

// Expert shards: contiguous runs of the (layer, expert) order, as synth makes them; a shard an
// interrupted run finished is kept.
void write_expert_shards(const std::string& out_dir, const ConversionPlan& p, const CheckpointExperts& experts, TensorReader& reader,
                         ConvertReport& rep) {
  const model::ModelConfig& c = p.c;
  const int64_t total = c.num_expert_slots();
  const bool as_shipped = c.expert_format.scheme != WeightScheme::Plain && c.expert_format.scheme == experts.native();
  for (int s = 0; s < p.shards; ++s) {
    const int64_t begin = total * s / p.shards, end = total * (s + 1) / p.shards;
    const std::string path = (fs::path(out_dir) / io::shard_file_name(s)).string();
    if (finished_before(path, p.fingerprint)) {
      for (int64_t i = begin; i < end; ++i) experts.skip(reader, p.decoder_layer(i), i % c.num_experts);
      ++rep.files_kept;
      continue;
    }
    io::AtomicFile out(path);
    {
      io::ExpertShardWriter w(out.temp_path(), c, path);
      for (int64_t i = begin; i < end; ++i) {  // written at its MoE layer's row
        const int64_t layer = p.decoder_layer(i), e = i % c.num_experts;
        if (as_shipped) {
          w.write_raw(i / c.num_experts, e, experts.read_raw(reader, layer, e, c).data());
          continue;
        }
        const ExpertTensors t = experts.read(reader, layer, e);
        w.write(i / c.num_experts, e, t.w1.data(), t.w3.data(), t.w2.data(), t.bias.empty() ? nullptr : t.bias.data());
      }
      w.set_attr("converted_from", p.fingerprint);
      w.close();
    }
    out.commit();
    ++rep.files_written;
  }
}

// model.h5, last: its presence means the conversion is complete.
void write_dense_part(const std::string& out_dir, const HfCheckpoint& ckpt, const ConversionPlan& p, TensorReader& reader,
                      ConvertReport& rep) {
  const std::string model_path = io::model_h5_path(out_dir);
  if (finished_before(model_path, p.fingerprint)) {
    std::set<std::string> seen;
    for (const auto& [hf, shape] : p.dense)
      if (seen.insert(hf).second) reader.skip(hf);
    ++rep.files_kept;
    return;
  }
  const io::ExpertShardIndex index = io::ExpertShardIndex::build(out_dir, p.c);  // the shards' identities, for model.h5
  io::AtomicFile out(model_path);
  {
    io::ModelFileWriter w(out.temp_path(), p.c, model_path);
    const bool interleaved = p.c.attention_type == model::AttentionType::Mla && rope_interleaved(ckpt.config_text(), p.c);
    std::string last_name;  // a fused tensor feeds adjacent datasets: read once
    std::vector<float> last;
    for (std::size_t i = 0; i < p.dense.size(); ++i) {
      const auto& [hf, shape] = p.dense[i];
      if (hf != last_name) {
        last = reader.read(hf, shape);
        last_name = hf;
      }
      std::vector<float> v = p.rows[i].empty() ? last : gather_rows(last, shape, p.rows[i]);
      if (interleaved) deinterleave_rope(p.ours[i], p.c, v);
      w.write(p.ours[i], v.data());
    }
    w.set_attr("num_expert_shards", p.shards);
    w.set_shard_identities(index.shard_identities());
    w.set_attr("converted_from", p.fingerprint);
    w.close();
  }
  out.commit();
  ++rep.files_written;
  index.keep();  // for the first start: the walk above could not keep it before model.h5 existed
}

// The tokenizer and generation settings travel with the model, as they are.
void copy_tokenizer_files(const std::string& from, const std::string& out_dir) {
  std::error_code ec;
  for (const char* name : kTokenizerFiles) {
    const fs::path src = fs::path(from) / name;
    if (!fs::is_regular_file(src, ec)) continue;
    io::AtomicFile out((fs::path(out_dir) / name).string());
    out.write(io::read_regular_file(src.string()));
    out.commit();
  }
}

ConvertReport convert_local(const ConvertConfig& cfg, const HfCheckpoint& ckpt, const std::function<void(uint64_t, uint64_t)>& progress) {
  ConvertReport rep;
  ConversionPlan p = plan_conversion(cfg, ckpt, rep);
  const CheckpointExperts experts(ckpt, p.c, p.nm);
  choose_expert_format(cfg, experts.native(), ckpt.config_path(), p.c, rep.notes);
  if (experts.form() == CheckpointExperts::Form::Stacked && experts.fp8() && experts.native() == WeightScheme::Plain && cfg.quantize == "keep")
    rep.notes += "experts: stacked fp8 dequantized to " + std::string(dtype_name(p.c.dtype)) + ": a 128-row block of gate_up_proj holds gate and up rows (" +
                 "intermediate_size " + std::to_string(p.c.intermediate_size) + " is not a multiple of 128)\n";
  finish_plan(p, ckpt, cfg);
  rep.config = p.c;
  rep.shards = p.shards;
  prepare_output(cfg.out, cfg.from, p.shards, rep);
  check_checkpoint(cfg, ckpt, p, experts);
  TensorReader reader(ckpt, bytes_to_read(ckpt, p), progress);
  write_expert_shards(cfg.out, p, experts, reader, rep);
  write_dense_part(cfg.out, ckpt, p, reader, rep);
  if (p.tied) rep.notes += "tie_word_embeddings: lm_head is a copy of embed_tokens\n";
  rep.bytes_read = reader.done();
  copy_tokenizer_files(cfg.from, cfg.out);
  return rep;
}

}  // namespace

}  // namespace moerun::convert
