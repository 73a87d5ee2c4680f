// How a checkpoint holds its experts (per expert, stacked over the experts, fused as gpt-oss saves
// them, or MXFP4 as shipped), and one expert read from it: as float32 matrices (native forms
// dequantized exactly) or in its native form as shipped (MXFP4, fp8-block, compressed-tensors INT4).
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "base/dtype.hpp"
#include "base/native_quant.hpp"
#include "base/weight_scheme_table.hpp"
#include "convert/tensor_reader.hpp"
#include "io/expert_shards.hpp"
#include "model/hf_config.hpp"
#include "model/model_config.hpp"

namespace moerun::convert {

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
inline void store_biases(const std::vector<float>& bias, DType dtype, unsigned char* out) {
  if (dtype == DType::F32)
    std::memcpy(out, bias.data(), bias.size() * 4);
  else
    f32_to_bf16(bias.data(), reinterpret_cast<uint16_t*>(out), bias.size());
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
    if (!nm.expert_w1.empty())
      form_ = stacked_module(ckpt) ? Form::Stacked : Form::PerExpert;
    else
      form_ = ckpt.has(layer_name(0, "mlp.experts.gate_up_proj_blocks")) ? Form::Mxfp4 : Form::Fused;
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
      const std::size_t half = static_cast<std::size_t>(ff * d),
                        scale_half = static_cast<std::size_t>(fp8_scale_rows(ff) * fp8_scale_cols(d));
      put("w1", gu.values.data(), half);
      put("w3", gu.values.data() + half, half);
      put("w1_scales", gu.scales.data(), scale_half * 4);
      put("w3_scales", gu.scales.data() + scale_half, scale_half * 4);
      put("w2", down.values.data(), down.values.size());
      put("w2_scales", down.scales.data(), down.scales.size() * 4);
      return raw;
    }
    if (form_ == Form::PerExpert) {  // fp8: the e4m3 bytes and their float32 scales; INT4: values, scales, levels
      for (auto [part, pattern, rows, cols] :
           {std::tuple{"w1", &nm_.expert_w1, ff, d}, std::tuple{"w3", &nm_.expert_w3, ff, d}, std::tuple{"w2", &nm_.expert_w2, d, ff}}) {
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
    if (form_ == Form::Fused)
      names.insert(names.end(), {"gate_up_proj", "down_proj"});
    else
      names.insert(names.end(), {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"});
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

}  // namespace moerun::convert
