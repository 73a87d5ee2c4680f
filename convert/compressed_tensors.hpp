// compressed-tensors' pack-quantized INT4 checkpoints (quantization_config quant_method
// "compressed-tensors", format "pack-quantized"): what llm-compressor and AutoRound write for W4A16
// and what Kimi K2-Thinking / K2.5 ship their routed experts in. A quantized linear X has, in place
// of X.weight:
//   X.weight_packed      int32 [out, in / 8]: eight 4-bit values a word, element 8j + i in bits
//                        4i..4i+3 of word j, each stored as q + 8 (q in [-8, 7]);
//   X.weight_scale       bf16 or f16 [out, in / G], G the group size (32, 64 or 128);
//   X.weight_shape       int [2]: out, in;
//   X.weight_zero_point  (asymmetric schemes) int32 [ceil(out / 8), in / G], packed the same way
//                        along the rows;
// and X.weight = (q - zero_point) * scale, rounded to the scale's type (compressed-tensors'
// dequantize). moerun keeps it as its int4 expert format (base/quant_format.hpp) and dequantizes
// what it keeps as floats (the dense layers) exactly that way.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "convert/hf_checkpoint.hpp"

namespace moerun::convert {

// The one INT4 scheme of a quantization_config: its group size and symmetry, and which linears it
// covers (config_groups' targets, less the ignore list: names, or "re:" patterns matched at the
// start of the module name as Python's re.match does).
struct PackedInt4Scheme {
  int64_t group_size = 0;
  bool symmetric = true;
  std::vector<std::string> targets, ignore;
  bool covers(const std::string& module) const;
};

// The scheme of quantization_config `q` when its quant_method is compressed-tensors (nullopt for
// another method); BadInput naming `where` and the field for anything but weight-only INT4
// pack-quantized groups of 32, 64 or 128.
std::optional<PackedInt4Scheme> read_packed_int4_scheme(const nlohmann::json& q, const std::string& where);

// Every INT4 (packed) tensor of the checkpoint against its quantization_config: there must be a
// compressed-tensors one, covering the tensor (targets less ignore, by the text model's or the stored
// name), with zero points exactly when asymmetric and the group size the scales hold. BadInput
// naming config.json's field or the tensor.
void check_int4_tensors(const HfCheckpoint& ckpt);
// A quantization_config that is there must be an object: BadInput naming the field otherwise.
void check_quantization_config_type(const std::string& config_json, const std::string& config_path);

// Whether `name` is one of the tensors that stand for a packed X.weight (X.weight_packed,
// _scale, _shape, _zero_point); sets `weight` to X.weight.
bool is_packed_int4_part(const std::string& name, std::string* weight = nullptr);

// One matrix in moerun's int4 stored form: the values as shipped (the int32 words' bytes are two
// values a byte, low nibble first), and per group of 32 its scale's bits (the shipped group's,
// repeated over its groups of 32) and its level byte (zero level, fp16 flag).
struct PackedInt4Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> values;  // [rows, cols / 2]
  std::vector<uint16_t> scales;  // [rows, cols / 32]
  std::vector<uint8_t> levels;  // [rows, cols / 32]
};

// Checks X.weight's parts against [rows, cols] (dtypes, shapes, weight_shape's values, a group size
// of 32, 64 or 128 that divides cols, no activation-order g_idx): BadInput naming the file and tensor.
void check_packed_int4(const HfCheckpoint& ckpt, const std::string& weight, int64_t rows, int64_t cols);
// Reads X.weight = `weight` (checked as above), its scales scanned for NaN and Inf.
PackedInt4Matrix read_packed_int4(const HfCheckpoint& ckpt, const std::string& weight, int64_t rows, int64_t cols);
// The weights as compressed-tensors dequantizes them, as float32 [rows, cols].
std::vector<float> dequantize(const PackedInt4Matrix& m);

}  // namespace moerun::convert
