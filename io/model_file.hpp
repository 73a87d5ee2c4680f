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
#include "io/layer_tensors.hpp"
#include "io/positional_file.hpp"
#include "model/model_schema.hpp"

namespace moerun::io {

// The token embedding [vocab, d] in the stored dtype (rows are widened to float32 as they are looked
// up). From a local model.h5 that stores it contiguously a lookup reads its row from the file
// (pread, no read-ahead): the page cache keeps the rows in use and the kernel drops them under
// pressure, and none counts in this process's RSS (a mapping did: its faults mapped the 64 KiB
// around each row once the load's scan had the table in the page cache). Otherwise it is read into
// memory.
struct EmbeddingTable {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;  // in memory: rows x cols elements (null when read from `file`)
  std::shared_ptr<const void> storage;  // keeps `data` alive
  std::shared_ptr<const PositionalFile> file;  // else the file whose bytes at `file_offset` are the table
  uint64_t file_offset = 0;
  uint64_t xxh64 = 0;  // of the bytes, from the load's scan (fingerprints use it: no second pass)
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
  std::vector<float> final_norm;  // [d]
  WeightMatrix lm_head;  // [vocab, d], stored dtype
  // Each decoder layer's tensors by schema name, as loaded; the forward's blocks take them
  // (runtime/blocks), after which they are empty here.
  std::vector<LayerTensors> layers;
  // The model.h5 xxh64 attributes of the quantizable matrices (io/dense_quant_cache), by path, when
  // loaded for --quantize-dense from a model that has them: what the dense cache is checked against.
  std::map<std::string, uint64_t> source_xxh64;
};

std::string model_h5_path(const std::string& model_dir);

// The matrix a row of the schema (model/model_schema) was loaded into, or null: a vector's row, the
// embedding table (it may be mapped), or a layer's tensor the blocks took.
WeightMatrix* dense_matrix(DenseWeights& w, const model::DenseDataset& ds);

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
void expect_dataset(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape, DType dtype);
// The same for any element type (class, size, signedness); `type_text` says what was expected.
void expect_dataset_type(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape,
                         const H5TypeInfo& type, const char* type_text);

// Throws BadInput "`where`: `tensor` contains NaN at [r,c]" if any element is not finite.
// `first_row`: the row index of data's first row in the tensor (a scan in blocks).
void check_finite(const void* data, DType dtype, int64_t rows, int64_t cols, const std::string& where, const std::string& tensor,
                  int64_t first_row = 0);
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
void write_tensor(hid_t loc, const std::string& path, const std::vector<int64_t>& shape, const float* data, DType dtype, bool one_chunk,
                  Xxh64* stored = nullptr);

}  // namespace moerun::io
