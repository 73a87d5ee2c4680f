// Hugging Face checkpoint directory: config.json, the safetensors index, the files.
#include "convert/hf_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.hpp"
#include "base/xxh64.hpp"
#include "convert/compressed_tensors.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"

namespace moerun::convert {
namespace fs = std::filesystem;

namespace {
std::string read_text(const std::string& path) {
  return io::read_regular_file(path);
}

// A multimodal checkpoint's text-model tensor under its text-only name: model.language_model.X
// (Qwen3.5) as model.X, language_model.model.X and language_model.lm_head.X (Kimi K2.5) as model.X
// and lm_head.X.
constexpr const char* kLanguagePrefixes[] = {"model.language_model.", "language_model.model.", "language_model.lm_head."};
constexpr const char* kTextPrefixes[] = {"model.", "model.", "lm_head."};
std::string text_model_name(const std::string& t) {
  for (std::size_t i = 0; i < std::size(kLanguagePrefixes); ++i)
    if (t.starts_with(kLanguagePrefixes[i])) return kTextPrefixes[i] + t.substr(std::strlen(kLanguagePrefixes[i]));
  return t;
}
}  // namespace

std::string text_model_config(const std::string& text, const std::string& where) {
  nlohmann::json j = io::parse_json(text, where);
  if (!j.is_object() || !j.contains("text_config") || !j["text_config"].is_object()) return text;
  nlohmann::json out = j;
  for (const char* sub : {"text_config", "vision_config", "audio_config"}) out.erase(sub);
  for (auto it = j["text_config"].begin(); it != j["text_config"].end(); ++it)
    if (it.key() != "model_type" || !out.contains("model_type")) out[it.key()] = it.value();
  return out.dump();
}

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(ErrorKind::Io, dir, ": no such directory (a Hugging Face model directory)");
  config_path_ = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path_, ec)) fail(ErrorKind::Io, config_path_, ": no such file (every Hugging Face model has one)");
  config_text_ = read_text(config_path_);
  Xxh64 h;
  h.text(config_text_);
  config_text_ = text_model_config(config_text_, config_path_);

  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  std::map<std::string, std::string> weight_map;  // tensor -> file name, when there is an index
  std::vector<std::string> file_names;
  if (fs::exists(index, ec)) {
    nlohmann::json j = io::parse_json(read_text(index), index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(ErrorKind::BadInput, index, ": not a safetensors index (no weight_map object)");
    std::set<std::string> names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(ErrorKind::BadInput, index, ": weight_map[", it.key(), "] is not a file name");
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        fail(ErrorKind::BadInput, index, ": weight_map[", it.key(), "] = \"", f, "\" is not a file in the directory");
      weight_map[it.key()] = f;
      names.insert(f);
    }
    file_names.assign(names.begin(), names.end());
  } else if (fs::exists(single, ec)) {
    file_names.push_back("model.safetensors");
  } else {
    fail(ErrorKind::Io, dir, ": no model.safetensors or model.safetensors.index.json (only safetensors weights are read)");
  }
  for (const auto& name : file_names) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path, ec)) fail(ErrorKind::Io, path, ": no such file (listed in model.safetensors.index.json)");
    files_.emplace_back(path);
    const std::size_t fi = files_.size() - 1;
    h.text(name).value(files_[fi].identity());  // the bytes too, not only the header
    for (const auto& [t, info] : files_[fi].tensors()) {
      h.text(t).text(info.dtype).vec(info.shape).value(info.begin).value(info.end);
      if (weight_map.empty() || weight_map.count(t)) {
        const std::string name = text_model_name(t);
        if (where_.count(name)) fail(ErrorKind::BadInput, path, ": tensor ", t, " is also in ", files_[where_[name]].path());
        where_[name] = fi;
        if (name != t) stored_[name] = t;
      }
    }
  }
  for (const auto& [t, f] : weight_map)
    if (!where_.count(text_model_name(t)))
      fail(ErrorKind::BadInput, (fs::path(dir) / f).string(), ": has no tensor ", t, " (model.safetensors.index.json says it does)");
  for (const auto& [t, fi] : where_) {
    std::string weight;
    if (!t.ends_with(".weight_packed") || !is_packed_int4_part(t, &weight) || where_.count(weight)) continue;
    SafetensorInfo info = files_[fi].info(stored(t));
    info.name = weight;
    info.dtype = "INT4";
    if (!info.shape.empty()) info.shape.back() *= 8;
    packed_[weight] = info;
  }
  fingerprint_ = h.digest();
}

const std::string& HfCheckpoint::stored(const std::string& name) const {
  const auto it = stored_.find(name);
  return it == stored_.end() ? name : it->second;
}

const SafetensorInfo& HfCheckpoint::info(const std::string& name) const {
  if (const auto p = packed_.find(name); p != packed_.end()) return p->second;
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorKind::BadInput, dir_, ": the checkpoint has no tensor ", spelled(name));
  return files_[it->second].info(stored(name));
}

std::string HfCheckpoint::file_of(const std::string& name) const {
  if (packed_.count(name)) return file_of(name + "_packed");
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorKind::BadInput, dir_, ": the checkpoint has no tensor ", spelled(name));
  return files_[it->second].path();
}

std::vector<float> HfCheckpoint::read_f32(const std::string& name, int64_t index) const {
  if (packed_.count(name)) fail(ErrorKind::Internal, name, " is packed INT4: read it with read_packed_int4");
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorKind::BadInput, dir_, ": the checkpoint has no tensor ", spelled(name));
  return files_[it->second].read_f32(stored(name), index);
}

std::vector<unsigned char> HfCheckpoint::read_raw(const std::string& name, int64_t index) const {
  if (packed_.count(name)) fail(ErrorKind::Internal, name, " is packed INT4: read it with read_packed_int4");
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorKind::BadInput, dir_, ": the checkpoint has no tensor ", spelled(name));
  return files_[it->second].read_raw(stored(name), index);
}

std::string HfCheckpoint::spelled(const std::string& name) const {
  if (const auto it = stored_.find(name); it != stored_.end()) return it->second;
  if (stored_.empty()) return name;
  // A name the checkpoint lacks, as it would spell it: its text model's prefix where its stored
  // names have one.
  const std::string& some = stored_.begin()->second;
  const bool kimi = some.starts_with("language_model.");
  for (std::size_t i = 0; i < std::size(kLanguagePrefixes); ++i)
    if (name.starts_with(kTextPrefixes[i]) && (kimi ? i > 0 : i == 0))
      return kLanguagePrefixes[i] + name.substr(std::strlen(kTextPrefixes[i]));
  return name;
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [t, f] : where_) out.push_back(t);
  for (const auto& [t, info] : packed_) out.push_back(t);
  return out;
}

uint64_t HfCheckpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [t, f] : where_) n += files_[f].info(stored(t)).end - files_[f].info(stored(t)).begin;
  return n;
}

}  // namespace moerun::convert
