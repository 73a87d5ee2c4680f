// model.h5: the dense part of a moe-hdf5 model (DESIGN §3). Reading validates every attribute and
// every dataset's presence, shape and dtype, naming the file and the offending item.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "base/matmul.hpp"
#include "base/xxh64.hpp"
#include "io/expert_shards.hpp"
#include "io/hdf5.hpp"
#include "model/model_config.hpp"
#include "io/model_location.hpp"
#include "io/positional_file.hpp"
#include "model/model_schema.hpp"

namespace moerun::io {

struct DenseLayerWeights {
  std::vector<float> attn_norm;  // [d]
  std::vector<float> ffn_norm;   // [d]
  WeightMatrix wq, wk, wv, wo;   // stored dtype
  WeightMatrix gate;             // MoE layers; always float32: gate logits are computed in fp32
  FfnWeights mlp;                // dense layers (layer_mlp): w1, w3 [dense_ff, d], w2 [d, dense_ff]
  // Variants (empty unless the config turns them on).
  std::vector<float> bq, bk, bv;            // attention_bias: [heads*hd], [kv*hd], [kv*hd]
  std::vector<float> q_norm, k_norm;        // qk_norm: [heads*hd], [kv*hd] over the projection; [hd] each per head
  std::vector<float> bo;                    // attention_out_bias: [d]
  std::vector<float> sinks;                 // attention_sinks: [heads]
  std::vector<float> gate_bias;             // router_bias: [experts]
  std::vector<float> gate_correction_bias;  // router_correction_bias: [experts], float32 in the file
  // MLA (attention_type mla): wq_a [q_lora, d], q_a_norm [q_lora], wq_b [heads*head_dim, q_lora]
  // (or wq [heads*head_dim, d] without q_lora_rank), wkv_a [kv_lora + rope, d], kv_a_norm
  // [kv_lora], wkv_b [heads*(nope + v), kv_lora]; wo [d, heads*v]. Each head's q is nope values
  // then rope values, the RoPE part in rotate_half order (convert de-interleaves DeepSeek's).
  WeightMatrix wq_a, wq_b, wkv_a, wkv_b;
  std::vector<float> q_a_norm, kv_a_norm;
  // wkv_b split per head by the runtime when it prepares the weights (runtime/mla_attention):
  // W_uk [nope, kv_lora], its transpose [kv_lora, nope] and W_uv [v, kv_lora]; wkv_b is then freed.
  std::vector<WeightMatrix> mla_uk, mla_uk_t, mla_uv;
  // DSA's indexer (dsa.index_heads > 0): wq_b [heads*dim, q_lora], wk [dim, d], weights [heads, d];
  // the key's LayerNorm weight and bias [dim]. RoPE parts in rotate_half order, as MLA's.
  WeightMatrix idx_wq_b, idx_wk, idx_weights;
  std::vector<float> idx_k_norm, idx_k_norm_bias;
  // Gated DeltaNet (linear layers): w_qkv [conv channels, d] (q, k, v of every head in turn), w_z
  // [v_heads*v_dim, d], w_b and w_a [v_heads, d]; conv [channels, kernel], dt_bias and A_log
  // [v_heads], norm [v_dim]; wo is its out_proj [d, v_heads*v_dim].
  WeightMatrix lin_qkv, lin_z, lin_b, lin_a;
  std::vector<float> lin_conv, lin_dt_bias, lin_A_log, lin_norm;
  WeightMatrix wq_gate;                     // attention_output_gate: [heads*hd, d]
  FfnWeights shared_expert;                // shared expert: w1, w3 [sff, d], w2 [d, sff]
  std::vector<float> shared_expert_gate;    // its gate [d] (one output row), when shared_expert_gated
};

// The token embedding [vocab, d] in the stored dtype (rows are widened to float32 as they are looked
// up). From a local model.h5 that stores it contiguously a lookup reads its row from the file
// (pread, no read-ahead): the page cache keeps the rows in use and the kernel drops them under
// pressure, and none counts in this process's RSS (a mapping did: its faults mapped the 64 KiB
// around each row once the load's scan had the table in the page cache). Otherwise it is read into
// memory.
struct EmbeddingTable {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;            // in memory: rows x cols elements (null when read from `file`)
  std::shared_ptr<const void> storage;   // keeps `data` alive
  std::shared_ptr<const PositionalFile> file;  // else the file whose bytes at `file_offset` are the table
  uint64_t file_offset = 0;
  uint64_t xxh64 = 0;                    // of the bytes, from the load's scan (fingerprints use it: no second pass)
  std::size_t row_bytes() const { return static_cast<std::size_t>(cols) * dtype_size(dtype); }
  std::size_t bytes() const { return static_cast<std::size_t>(rows) * row_bytes(); }
  // Row `id`'s bytes: in `data`, or read into `scratch` (resized as needed). Io or BadInput naming
  // the file when a read fails.
  const void* row(int64_t id, AlignedBuffer& scratch) const;
};

struct DenseWeights {
  model::ModelConfig config;
  // Where the matrices live: a HugePagePool (every step streams them), or null: the C heap.
  std::shared_ptr<HugePagePool> memory;
  EmbeddingTable embed_tokens;
  std::vector<float> final_norm;    // [d]
  WeightMatrix lm_head;             // [vocab, d], stored dtype
  std::vector<DenseLayerWeights> layers;
  // The model.h5 xxh64 attributes of the quantizable matrices (io/dense_quant_cache), by path, when
  // loaded for --quantize-dense from a model that has them: what the dense cache is checked against.
  std::map<std::string, uint64_t> source_xxh64;
};

std::string model_h5_path(const std::string& model_dir);

// Where a row of the schema (model/model_schema) lands in `w`: a float32 array, or a matrix
// (the gate is a float32 matrix). The embedding table is no target: it may be mapped.
using DenseTarget = std::variant<std::vector<float>*, WeightMatrix*>;
DenseTarget dense_target(DenseWeights& w, const model::DenseDataset& ds);

// Reads and validates the root attributes of model.h5 (a directory's or an object-store prefix's).
model::ModelConfig read_model_config(const ModelLocation& model);
// Reads every dense tensor and scans each for NaN/Inf (BadInput naming the first found): a NaN
// weight would otherwise turn every token into 0 without an error.
// `quantized` q8/q4 (--quantize-dense): the LM head and attention projections are taken from the
// model directory's dense cache where it holds them for this model.h5 (already quantized), else read
// as stored.
// `memory`: where the matrices are allocated (base/huge_page_pool); null: the C heap.
DenseWeights load_dense_weights(const ModelLocation& model, WeightScheme quantized = WeightScheme::Plain,
                                std::shared_ptr<HugePagePool> memory = nullptr);

// "[64,256]"
std::string shape_str(const std::vector<int64_t>& shape);
// Checks presence, shape and dtype (float32, or uint16 bits for bfloat16) of a weight dataset;
// BadInput naming `fname` and `path` otherwise.
void expect_dataset(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape,
                    DType dtype);
// The same for any element type (class, size, signedness); `type_text` says what was expected.
void expect_dataset_type(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape,
                         const H5TypeInfo& type, const char* type_text);

// Throws BadInput "`where`: `tensor` contains NaN at [r,c]" if any element is not finite.
// `first_row`: the row index of data's first row in the tensor (a scan in blocks).
void check_finite(const void* data, DType dtype, int64_t rows, int64_t cols, const std::string& where,
                  const std::string& tensor, int64_t first_row = 0);
// The same for IEEE half bits (the quantized formats' scales).
void check_finite_fp16(const uint16_t* data, int64_t rows, int64_t cols, const std::string& where, const std::string& tensor);

// Writes a model.h5 at `path` piece by piece (synth, convert). Float data is given as float32 and
// stored in the config's dtype.
class ModelFileWriter {
 public:
  // `name`: what messages call the file (its final name when `path` is a temp file).
  ModelFileWriter(const std::string& path, const model::ModelConfig& config, const std::string& name = "");
  void write(const std::string& dataset, const std::vector<int64_t>& shape, const float* data);
  void write(const model::DenseDataset& dataset, const float* data);  // in its own dtype (float32 where it says so)
  void set_attr(const std::string& name, int64_t value);
  void set_attr(const std::string& name, const std::string& value);
  // /expert_shards: each shard's identity in name order (ExpertShardIndex::shard_identities).
  void set_shard_identities(const std::vector<uint64_t>& ids);
  // Flushes and closes the file (Io naming it when that fails, e.g. on a full disk); call before
  // the file is committed. Without it the destructor closes quietly (an error path).
  void close();

 private:
  void write_root_attributes();
  model::ModelConfig config_;
  std::string path_;
  H5Handle file_;
};

// Writes a float32 tensor as the given dtype into `loc` (float32, or bfloat16 bits as uint16);
// the bytes as stored are also fed to `stored` when given (the checksums of the format).
void write_tensor(hid_t loc, const std::string& path, const std::vector<int64_t>& shape, const float* data,
                  DType dtype, bool one_chunk, Xxh64* stored = nullptr);

}  // namespace moerun::io
