// A Hugging Face model directory as `moerun convert` reads it: config.json, and the weights in
// safetensors (one model.safetensors, or the shards that model.safetensors.index.json lists). Gives
// each tensor by name from the file that holds it, one at a time. Every file named by the index
// must exist and hold the tensors the index says it holds (BadInput naming the file and tensor).
// A compressed-tensors INT4 linear's X.weight_packed (convert/compressed_tensors.hpp) also stands
// for X.weight: a tensor of dtype "INT4" and the unpacked shape, held in the packed one's file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "convert/safetensors.hpp"

namespace moerun::convert {

// config.json with a text_config object (a multimodal model): its fields over the top level's (the
// top level's model_type kept: it names the family), the sub-configs dropped. Else as it is.
std::string text_model_config(const std::string& text, const std::string& where);

class HfCheckpoint {
 public:
  // A multimodal checkpoint's text model reads as a text-only one: config.json's text_config
  // fields over the top level's, and the tensors under model.language_model. named model.*.
  explicit HfCheckpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }
  const std::string& config_text() const { return config_text_; }  // config.json as read
  bool has(const std::string& name) const { return where_.count(name) > 0 || packed_.count(name) > 0; }
  const SafetensorInfo& info(const std::string& name) const;  // BadInput naming the tensor when absent
  std::string file_of(const std::string& name) const;  // the safetensors file that holds it
  std::vector<float> read_f32(const std::string& name, int64_t index = -1) const;  // index: as SafetensorsFile
  std::vector<unsigned char> read_raw(const std::string& name, int64_t index = -1) const;
  std::vector<std::string> names() const;  // packed X.weight included, with their parts
  // `name` (model.X) as this checkpoint spells it: model.language_model.X in a multimodal one, for
  // messages that must name what is in the user's index.
  std::string spelled(const std::string& name) const;
  uint64_t total_bytes() const;  // of every tensor
  // xxh64 over config.json, every safetensors header and each file's identity (size, inode,
  // modification and change times): what a conversion was made from.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::string dir_, config_path_, config_text_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t> where_;  // tensor -> index in files_
  std::map<std::string, std::string> stored_;  // tensor -> its name in the file, where they differ
  std::map<std::string, SafetensorInfo> packed_;  // X.weight -> dtype INT4, the unpacked shape, X.weight_packed's bytes
  const std::string& stored(const std::string& name) const;
  uint64_t fingerprint_ = 0;
};

}  // namespace moerun::convert
