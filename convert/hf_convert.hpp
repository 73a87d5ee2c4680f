// `moerun convert`: a Hugging Face checkpoint (config.json + safetensors) to a moe-hdf5 model, for
// every family of the family table (model/model_family.hpp); MXFP4, fp8 (128 x 128 block) and
// compressed-tensors INT4 checkpoints keep their experts as shipped.
// Tensors stream one at a time (memory bounded by the largest tensor). Every output file is
// written atomically and carries the fingerprint of what it was made from, so a rerun after an
// interruption keeps the files already finished and makes only the rest. The expert shards come
// first and model.h5 last, so a partly converted directory is never taken for a model. An s3://
// output is made in a local staging directory, then uploaded file by file (model.h5 last); a
// rerun skips the objects already there with the same xxh64 (x-amz-meta-moerun-xxh64).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/model_config.hpp"
#include "io/object_store.hpp"

namespace moerun::convert {

struct ConvertConfig {
  std::string from;  // Hugging Face model directory
  std::string out;  // moe-hdf5 model directory (created), or s3://bucket/prefix
  io::S3Config s3;  // for an s3:// output
  std::string staging;  // s3:// output: the local directory it is made in first (default: in the
      // system temp directory, named by the checkpoint; removed after the upload)
  std::string dtype = "keep";  // keep | float32 | bfloat16 (keep: bf16 stays bf16, f32 and f16 become f32)
  int shards = 0;  // expert shards; 0: about 2 GiB each
  // The experts' stored format (dense layers keep `dtype`): keep (the checkpoint's MXFP4 or fp8 as
  // shipped, else `dtype`) | none (dequantized to `dtype`) | q8 | q4.
  std::string quantize = "keep";
  void validate() const;  // Usage errors naming the option
};

struct ConvertReport {
  model::ModelConfig config;
  int shards = 0;
  int files_written = 0, files_kept = 0;  // kept: finished by an earlier, interrupted run
  int files_uploaded = 0, uploads_kept = 0;  // s3://: sent now, or already there with the same checksum
  uint64_t bytes_read = 0;  // tensor bytes read from the checkpoint
  std::string notes;  // what the conversion changed or dropped, one line each
};

// The moe-hdf5 config of a Hugging Face config.json (BadInput naming the file and the field for
// an unsupported architecture or setting). `dtype` is what the weights will be stored as; the end
// token may come from generation_config.json (its text, or empty) when config.json has none.
model::ModelConfig model_config_from_hf(const std::string& config_json, const std::string& where, DType dtype, std::string* notes,
                                        const std::string& generation_config_json = "");

// The experts' format a checkpoint of this config.json ships (its quantization_config: fp8 with
// 128 x 128 blocks, or mxfp4), which convert keeps by default; plain otherwise. For planning from a
// config alone (inspect --hf-config): the tensors themselves decide at convert.
WeightScheme shipped_expert_scheme(const std::string& config_json);
// The quantization_config convert reads (fp8 e4m3 with 128 x 128 blocks, mxfp4, or none): BadInput
// naming `config_path` and the field otherwise. Shared by convert and inspect --hf-config, so that
// inspect never plans what convert refuses.
void check_quantization_config(const std::string& config_json, const std::string& config_path);

// progress(done, total): tensor bytes processed so far, called after every tensor.
ConvertReport convert_hf_checkpoint(const ConvertConfig& cfg, const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace moerun::convert
