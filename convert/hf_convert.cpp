// Hugging Face checkpoint -> moe-hdf5: the plan, the checks before anything is written, the shard and
// dense writers, atomic and resumable files, the upload. The tensors are read by convert/tensor_reader,
// the experts by convert/checkpoint_experts, the config by convert/hf_model_config.
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
#include "convert/checkpoint_experts.hpp"
#include "convert/compressed_tensors.hpp"
#include "convert/hf_checkpoint.hpp"
#include "convert/hf_model_config.hpp"
#include "convert/tensor_reader.hpp"
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
  if (io::is_s3_url(out))
    io::parse_s3_url(out);
  else if (!staging.empty())
    fail(ErrorKind::Usage, "--staging goes with an s3:// --out");
  if (dtype != "keep" && dtype != "float32" && dtype != "bfloat16")
    fail(ErrorKind::Usage, "--dtype must be keep, float32 or bfloat16, not \"", dtype, "\"");
  if (shards < 0 || shards > 100000) fail(ErrorKind::Usage, "--shards must be in [0, 100000] (0: about 2 GiB each)");
  const auto scheme = weight_scheme_by_name(quantize);
  if (quantize != "keep" && quantize != "none" && !(scheme && weight_scheme_row(*scheme).convert_quantizable))
    fail(ErrorKind::Usage, "--quantize must be keep, none, ",
         weight_scheme_names([](const WeightSchemeRow& r) { return r.convert_quantizable; }), ", not \"", quantize, "\"");
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
  for (const char* name :
       {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"})
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
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " is F8_E4M3 but the checkpoint has no ",
         ckpt.spelled(sname), " (its block scales)");
  const SafetensorInfo& si = ckpt.info(sname);
  const std::size_t n = shape.size();
  std::vector<int64_t> want(shape.begin(), shape.end() - 2);
  want.insert(want.end(), {fp8_scale_rows(shape[n - 2]), fp8_scale_cols(shape[n - 1])});
  if (si.shape != want)
    fail(ErrorKind::BadInput, ckpt.file_of(sname), ": tensor ", ckpt.spelled(sname), " has shape ", io::shape_str(si.shape), ", expected ",
         io::shape_str(want), " (128 x 128 blocks of ", io::shape_str(shape), ")");
  if (si.dtype != "F32" && si.dtype != "BF16" && si.dtype != "F16")
    fail(ErrorKind::BadInput, ckpt.file_of(sname), ": tensor ", ckpt.spelled(sname), " has dtype ", si.dtype,
         ", expected F32, BF16 or F16");
}

// The experts' stored format: --quantize keep takes the checkpoint's native form (MXFP4, fp8) when
// it has one and the shapes allow it, none dequantizes, q8/q4 quantize. Notes say which.
void choose_expert_format(const ConvertConfig& cfg, WeightScheme native, const std::string& where, model::ModelConfig& c,
                          std::string& notes) {
  const std::string dense = dtype_name(c.dtype);
  const char* shipped = native == WeightScheme::Mxfp4  ? "MXFP4"
                        : native == WeightScheme::Int4 ? "INT4 (compressed-tensors pack-quantized)"
                                                       : "fp8 (e4m3, 128 x 128 block scales)";
  if (cfg.quantize == "none" || (cfg.quantize == "keep" && native == WeightScheme::Plain)) {
    if (native != WeightScheme::Plain) notes += std::string("experts: ") + shipped + " dequantized to " + dense + " (--quantize none)\n";
    return;
  }
  const model::WeightFormat want =
      cfg.quantize == "keep" ? model::WeightFormat{c.dtype, native} : model::parse_weight_format(cfg.quantize, c.dtype, "--quantize");
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
  if (cfg.quantize == "keep")
    notes += std::string("experts: kept as shipped, ") + shipped + "; dense layers " + dense + "\n";
  else
    notes += "experts quantized to " + cfg.quantize +
             (cfg.quantize == "int4" ? " (groups of 32, bf16 scales)" : " (groups of 32, fp16 scales)") +
             (native != WeightScheme::Plain ? std::string(" from ") + shipped + " dequantized" : "") + "; dense layers stay " + dense +
             "\n";
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
  bool tied = false;  // tie_word_embeddings: lm_head is embed_tokens
  int shards = 0;
  std::string generation;  // generation_config.json's text, or empty
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
constexpr const char* kTokenizerFiles[] = {"tokenizer.model",         "tokenizer.json",         "tokenizer_config.json",
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
  if (fs::equivalent(out, from, ec))
    fail(ErrorKind::Usage, "--out ", out, " is the --from checkpoint directory; writing it would change the input");
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
    fail(ErrorKind::BadInput, cfg.from, ": the checkpoint has no tensor ", ckpt.spelled(name), ", which config.json implies (",
         c.architecture, ", ", c.num_layers, " layers, ", c.num_experts, " experts)");
  const SafetensorInfo& info = ckpt.info(name);
  if (info.shape != shape)
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " has shape ", io::shape_str(info.shape),
         ", config.json says ", io::shape_str(shape));
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
    if (expected.count(n) || fp8_scales || int4_part || n.find("rotary_emb.inv_freq") != std::string::npos ||
        (p.tied && n == "lm_head.weight") || empty_shared_expert(n, ckpt.info(n), c))
      continue;
    fail(ErrorKind::BadInput, ckpt.file_of(n), ": tensor ", ckpt.spelled(n), " has no place in a ", c.architecture,
         " model as config.json describes it (", c.num_layers, " layers, ", c.num_experts, " experts)");
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
  if (experts.form() == CheckpointExperts::Form::Stacked && experts.fp8() && experts.native() == WeightScheme::Plain &&
      cfg.quantize == "keep")
    rep.notes += "experts: stacked fp8 dequantized to " + std::string(dtype_name(p.c.dtype)) +
                 ": a 128-row block of gate_up_proj holds gate and up rows (" + "intermediate_size " +
                 std::to_string(p.c.intermediate_size) + " is not a multiple of 128)\n";
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
