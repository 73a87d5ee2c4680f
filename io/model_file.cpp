// model.h5 reader and writer.
#include "io/model_file.hpp"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "base/host.hpp"
#include "base/xxh64.hpp"
#include "io/dense_quant_cache.hpp"
#include "model/model_attributes.hpp"

namespace moerun::io {
namespace {

// Format version 2: every dense dataset carries the xxh64 of its bytes as stored; checked after
// the NaN scan (which can name the element). A flipped bit in model.h5 is then an error, not
// different tokens. check_dense_checksum takes the bytes' xxh64 `sum` (a scan in blocks sums as it
// goes), verify_dense computes it; both return it, whatever the version.
uint64_t check_dense_checksum(hid_t file, const std::string& fname, const std::string& path, uint64_t sum, int64_t format_version) {
  if (format_version < 2) return sum;
  const auto expected = h5_attr_uint64(h5_open_object(file, path), "xxh64");
  if (!expected) fail(ErrorKind::BadInput, fname, ": ", path, " has no xxh64 attribute (format_version 2 needs one)");
  if (sum != *expected)
    fail(ErrorKind::BadInput, fname, ": ", path, " checksum mismatch (xxh64 attribute ", *expected, ", data ", sum,
         "): the file changed after it was written");
  return sum;
}

uint64_t verify_dense(hid_t file, const std::string& fname, const std::string& path, const void* stored, std::size_t bytes,
                      int64_t format_version) {
  return check_dense_checksum(file, fname, path, Xxh64().bytes(stored, bytes).digest(), format_version);
}

std::vector<float> read_vector_f32(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape,
                                   DType dtype, int64_t version) {
  expect_dataset(file, fname, path, shape, dtype);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<float> out(static_cast<std::size_t>(n));
  if (dtype == DType::F32) {
    h5_read(file, path, H5T_NATIVE_FLOAT, out.data());
    check_finite(out.data(), DType::F32, shape[0], shape.size() > 1 ? shape[1] : 1, fname, path);
    verify_dense(file, fname, path, out.data(), out.size() * sizeof(float), version);
  } else {
    std::vector<uint16_t> raw(out.size());
    h5_read(file, path, H5T_NATIVE_UINT16, raw.data());
    bf16_to_f32(raw.data(), out.data(), raw.size());
    check_finite(out.data(), DType::F32, shape[0], shape.size() > 1 ? shape[1] : 1, fname, path);
    verify_dense(file, fname, path, raw.data(), raw.size() * sizeof(uint16_t), version);
  }
  return out;
}

WeightMatrix read_matrix(hid_t file, const std::string& fname, const std::string& path, int64_t rows, int64_t cols, DType dtype,
                         int64_t version, const std::shared_ptr<HugePagePool>& memory) {
  expect_dataset(file, fname, path, {rows, cols}, dtype);
  WeightMatrix m;
  m.data.place_in(memory);
  m.allocate(dtype, rows, cols);
  h5_read(file, path, dtype == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, m.data.data());
  check_finite(m.data.data(), dtype, rows, cols, fname, path);
  verify_dense(file, fname, path, m.data.data(), static_cast<std::size_t>(rows * cols) * dtype_size(dtype), version);
  return m;
}

// An embedding table read from its file: the NaN scan and the xxh64 of its bytes, 4 MiB of rows at a
// time through one buffer.
uint64_t scan_embedding_file(const EmbeddingTable& t, const std::string& fname, const std::string& ds) {
  const auto rb = static_cast<int64_t>(t.row_bytes());
  const int64_t block = std::max<int64_t>(1, (int64_t{4} << 20) / rb);
  AlignedBuffer buf;
  Xxh64 sum;
  for (int64_t r = 0; r < t.rows; r += block) {
    const int64_t n = std::min(block, t.rows - r);
    const unsigned char* p = t.file->read_view(t.file_offset + static_cast<uint64_t>(r * rb), static_cast<std::size_t>(n * rb), buf);
    check_finite(p, t.dtype, n, t.cols, fname, ds, r);
    sum.bytes(p, static_cast<std::size_t>(n * rb));
  }
  return sum.digest();
}

// The embedding table: read row by row from model.h5 where it is local and stores the table
// contiguously in little-endian order (the bytes in the file are the values), else read whole;
// scanned and checksummed either way.
EmbeddingTable read_embedding(hid_t file, const std::string& fname, bool local, const model::ModelConfig& c) {
  const std::string ds = "/embed_tokens";
  expect_dataset(file, fname, ds, {c.vocab_size, c.hidden_size}, c.dtype);
  EmbeddingTable t;
  t.dtype = c.dtype;
  t.rows = c.vocab_size;
  t.cols = c.hidden_size;
  const std::optional<uint64_t> at = local && h5_little_endian(file, ds) ? h5_contiguous_offset(file, ds) : std::nullopt;
  if (at) {
    t.file = std::make_shared<const PositionalFile>(fname, false);
    t.file_offset = *at;
    t.xxh64 = check_dense_checksum(file, fname, ds, scan_embedding_file(t, fname, ds), c.format_version);
    t.file->expect_random_access();
    return t;
  }
  auto buf = std::make_shared<AlignedBuffer>(t.bytes());
  h5_read(file, ds, c.dtype == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, buf->data());
  t.data = buf->data();
  t.storage = buf;
  check_finite(t.data, c.dtype, t.rows, t.cols, fname, ds);
  t.xxh64 = verify_dense(file, fname, ds, t.data, t.bytes(), c.format_version);
  return t;
}

template <typename T>
T require_attr(std::optional<T> v, const std::string& fname, const char* name) {
  if (!v) fail(ErrorKind::BadInput, fname, ": root attribute ", name, " is missing");
  return *v;
}

}  // namespace

const void* EmbeddingTable::row(int64_t id, AlignedBuffer& scratch) const {
  const std::size_t rb = row_bytes();
  if (data) return static_cast<const unsigned char*>(data) + static_cast<std::size_t>(id) * rb;
  return file->read_view(file_offset + static_cast<uint64_t>(id) * rb, rb, scratch);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << ']';
  return os.str();
}

void expect_dataset_type(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape,
                         const H5TypeInfo& type, const char* type_text) {
  if (!h5_exists(file, path)) fail(ErrorKind::BadInput, fname, ": dataset ", path, " is missing");
  H5DatasetInfo info = h5_dataset_info(file, path);
  if (info.shape != shape)
    fail(ErrorKind::BadInput, fname, ": ", path, " has shape ", shape_str(info.shape), ", expected ", shape_str(shape));
  if (info.type.cls != type.cls || info.type.size != type.size || (type.cls == H5T_INTEGER && info.type.is_signed != type.is_signed))
    fail(ErrorKind::BadInput, fname, ": ", path, " has type ", info.type.describe(), ", expected ", type_text);
}

void expect_dataset(hid_t file, const std::string& fname, const std::string& path, const std::vector<int64_t>& shape, DType dtype) {
  if (dtype == DType::F32)
    expect_dataset_type(file, fname, path, shape, {H5T_FLOAT, 4, true}, "float32");
  else
    expect_dataset_type(file, fname, path, shape, {H5T_INTEGER, 2, false}, "uint16 (bfloat16 bits)");
}

std::string model_h5_path(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / "model.h5").string();
}

namespace {
// True when any element's exponent bits are all ones (Inf or NaN). Branch-free over the bits so it
// vectorises: a full scan costs about as much as a memcpy, cheap enough to do on every load.
template <typename Bits, Bits kExponent>
bool any_not_finite(const Bits* p, int64_t n) {
  Bits bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<Bits>((p[i] & kExponent) == kExponent);
  return bad != 0;
}
}  // namespace

void check_finite(const void* data, DType dtype, int64_t rows, int64_t cols, const std::string& where, const std::string& tensor,
                  int64_t first_row) {
  const int64_t n = rows * cols;
  const bool bad = dtype == DType::F32 ? any_not_finite<uint32_t, 0x7f800000u>(static_cast<const uint32_t*>(data), n)
                                       : any_not_finite<uint16_t, 0x7f80>(static_cast<const uint16_t*>(data), n);
  if (!bad) return;
  for (int64_t i = 0; i < n; ++i) {
    const float v = dtype == DType::F32 ? static_cast<const float*>(data)[i] : bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    if (!std::isfinite(v))
      fail(ErrorKind::BadInput, where, ": ", tensor, " contains ", std::isnan(v) ? "NaN" : "Inf", " at [", first_row + i / cols, ",",
           i % cols, "]");
  }
}

void check_finite_fp16(const uint16_t* data, int64_t rows, int64_t cols, const std::string& where, const std::string& tensor) {
  if (!any_not_finite<uint16_t, 0x7c00>(data, rows * cols)) return;
  for (int64_t i = 0; i < rows * cols; ++i)
    if ((data[i] & 0x7c00) == 0x7c00)
      fail(ErrorKind::BadInput, where, ": ", tensor, " contains ", (data[i] & 0x3ff) ? "NaN" : "Inf", " at [", i / cols, ",", i % cols,
           "]");
}

namespace {
// /expert_shards: uint64 [shards], each shard's identity (format version 2).
std::vector<uint64_t> read_shard_ids(hid_t file, const std::string& fname) {
  if (!h5_exists(file, "/expert_shards")) fail(ErrorKind::BadInput, fname, ": dataset /expert_shards is missing (format_version 2)");
  const H5DatasetInfo info = h5_dataset_info(file, "/expert_shards");
  if (info.shape.size() != 1 || info.shape[0] > 100000 || info.type.cls != H5T_INTEGER || info.type.size != 8 || info.type.is_signed)
    fail(ErrorKind::BadInput, fname, ": /expert_shards must be uint64 [0..100000], is ", info.type.describe(), " ", shape_str(info.shape));
  std::vector<uint64_t> ids(static_cast<std::size_t>(info.shape[0]));
  if (!ids.empty()) h5_read(file, "/expert_shards", H5T_NATIVE_UINT64, ids.data());
  return ids;
}

// A root attribute as the table types it, absent as nullopt.
std::optional<model::AttributeValue> read_attribute(hid_t file, const model::ModelAttribute& a) {
  switch (a.type) {
    case model::AttributeType::Integer:
      if (const auto v = h5_attr_int(file, a.name)) return *v;
      break;
    case model::AttributeType::Float:
      if (const auto v = h5_attr_double(file, a.name)) return *v;
      break;
    case model::AttributeType::Text:
      if (auto v = h5_attr_string(file, a.name)) return std::move(*v);
      break;
  }
  return std::nullopt;
}

// The root attributes of an open model.h5 (`fname` names it in messages).
model::ModelConfig read_model_config(hid_t file, const std::string& fname) {
  return h5_reading(fname, [&] {
    auto fmt = require_attr(h5_attr_string(file, "format"), fname, "format");
    if (fmt != "moe-hdf5") fail(ErrorKind::BadInput, fname, ": root attribute format is \"", fmt, "\", expected \"moe-hdf5\"");
    auto ver = require_attr(h5_attr_int(file, "format_version"), fname, "format_version");
    if (ver < 1 || ver > model::kNewestFormatVersion)
      fail(ErrorKind::BadInput, fname, ": root attribute format_version is ", ver, ", expected 1 to ", model::kNewestFormatVersion);
    model::ModelConfig c;
    c.format_version = ver;
    for (const model::ModelAttribute& a : model::model_attributes()) a.read(c, read_attribute(file, a), fname);
    c.validate(fname);
    if (ver >= 2) c.shard_ids = read_shard_ids(file, fname);
    return c;
  });
}
}  // namespace

model::ModelConfig read_model_config(const ModelLocation& model) {
  model.check_exists();
  return read_model_config(model.open("model.h5"), model.file("model.h5"));
}

namespace {
// The quantizable matrices of an open model.h5: from `cache` when it holds one quantized from this very
// dataset (its xxh64 attribute), else as stored; records the attribute in w.source_xxh64.
class QuantizableReader {
 public:
  // `on`: --quantize-dense, and the model has xxh64 attributes (format version 2 and later).
  QuantizableReader(hid_t file, const std::string& fname, std::map<std::string, DenseCacheEntry> cache, bool on)
      : file_(file), fname_(fname), cache_(std::move(cache)), on_(on) {}
  WeightMatrix read(DenseWeights& w, const std::string& path, int64_t rows, int64_t cols) {
    const model::ModelConfig& c = w.config;
    if (!on_ || cols % 32 != 0) return read_matrix(file_, fname_, path, rows, cols, c.dtype, c.format_version, w.memory);
    expect_dataset(file_, fname_, path, {rows, cols}, c.dtype);
    const std::optional<uint64_t> src = h5_attr_uint64(h5_open_object(file_, path), "xxh64");
    if (src) w.source_xxh64[path] = *src;
    auto it = cache_.find(path);
    if (src && it != cache_.end() && it->second.source_xxh64 == *src && it->second.matrix.rows == rows && it->second.matrix.cols == cols) {
      WeightMatrix m = std::move(it->second.matrix);
      m.dtype = c.dtype;
      return m;
    }
    return read_matrix(file_, fname_, path, rows, cols, c.dtype, c.format_version, w.memory);
  }

 private:
  hid_t file_;
  std::string fname_;
  std::map<std::string, DenseCacheEntry> cache_;
  bool on_;
};

// One row of the schema into its place in `w`, in the form the row says it is held.
void read_dense_dataset(hid_t file, const std::string& fname, const model::DenseDataset& ds, QuantizableReader& quantizable,
                        DenseWeights& w) {
  const model::ModelConfig& c = w.config;
  const DType stored = ds.float32 ? DType::F32 : c.dtype;
  DenseTensor target = ds.matrix || ds.float32_matrix ? DenseTensor(WeightMatrix{}) : DenseTensor(std::vector<float>{});
  if (std::vector<float>* v = std::get_if<std::vector<float>>(&target)) {
    *v = read_vector_f32(file, fname, ds.path, ds.shape, stored, c.format_version);
  } else {
    WeightMatrix& m = std::get<WeightMatrix>(target);
    const int64_t rows = ds.shape[0], cols = ds.shape[1];
    if (ds.quantizable) {
      m = quantizable.read(w, ds.path, rows, cols);
    } else if (ds.matrix) {
      m = read_matrix(file, fname, ds.path, rows, cols, stored, c.format_version, w.memory);
    } else {  // a matrix held in float32 (the gate)
      const std::vector<float> f = read_vector_f32(file, fname, ds.path, ds.shape, stored, c.format_version);
      m.data.place_in(w.memory);
      m.allocate(DType::F32, rows, cols);
      std::copy(f.begin(), f.end(), m.data.as<float>());
    }
  }
  if (ds.layer >= 0)
    w.layers.at(static_cast<std::size_t>(ds.layer)).place(ds) = std::move(target);
  else if (ds.name == "final_norm")
    w.final_norm = std::get<std::vector<float>>(std::move(target));
  else if (ds.name == "lm_head")
    w.lm_head = std::get<WeightMatrix>(std::move(target));
  else
    fail(ErrorKind::Internal, "read_dense_dataset: no place for ", ds.path);
}

// Qwen3-Next's norms compute x * (1 + w) in float32: the stored w plus the offset, added once here
// (the same float32 sum transformers forms), leaves plain RMSNorms for the forward.
void apply_norm_weight_offset(DenseWeights& w) {
  const float offset = static_cast<float>(w.config.norm_weight_offset);
  if (offset == 0) return;
  for (const model::DenseDataset& ds : model::dense_datasets(w.config)) {
    if (!ds.norm_offset) continue;
    std::vector<float>& v = ds.layer < 0 ? w.final_norm : *w.layers[static_cast<std::size_t>(ds.layer)].vector(ds.name);
    for (float& x : v) x += offset;
  }
}

// `local`: fname is model.h5's path on this host (the embedding can be mapped). `quantized`: the
// --quantize-dense scheme, with `cache` the dense cache's usable entries.
DenseWeights read_dense_weights(hid_t file, const std::string& fname, bool local, WeightScheme quantized,
                                std::map<std::string, DenseCacheEntry> cache, std::shared_ptr<HugePagePool> memory) {
  DenseWeights w;
  w.memory = std::move(memory);
  w.config = read_model_config(file, fname);
  const model::ModelConfig& c = w.config;
  // Checked before allocating: a file whose (sparse, chunked) datasets claim tens of GiB would
  // otherwise get this process killed for memory instead of a clear error.
  const int64_t need = c.dense_params() * static_cast<int64_t>(sizeof(float));
  const int64_t have = host_memory_bytes();
  if (have > 0 && need > have)
    fail(ErrorKind::BadInput, fname, ": the dense weights need ", need >> 20, " MiB in memory, more than this host's ", have >> 20,
         " MiB (vocab_size ", c.vocab_size, ", hidden_size ", c.hidden_size, ", num_layers ", c.num_layers, ")");
  if (const int64_t room = mappable_memory_bytes(); room > 0 && need > room)
    fail(ErrorKind::Usage, fname, ": the dense weights need ", need >> 20, " MiB in memory, more than the ", room >> 20,
         " MiB the address-space limit (ulimit -v) leaves: raise the limit");
  QuantizableReader quantizable(file, fname, std::move(cache), quantized != WeightScheme::Plain && c.format_version >= 2);
  w.layers.resize(static_cast<std::size_t>(c.num_layers));
  for (const model::DenseDataset& ds : model::dense_datasets(c)) {
    if (ds.layer < 0 && ds.name == "embed_tokens")
      w.embed_tokens = read_embedding(file, fname, local, c);
    else
      read_dense_dataset(file, fname, ds, quantizable, w);
  }
  apply_norm_weight_offset(w);
  return w;
}
}  // namespace

WeightMatrix* dense_matrix(DenseWeights& w, const model::DenseDataset& ds) {
  if (ds.layer >= 0) return w.layers.at(static_cast<std::size_t>(ds.layer)).matrix(ds.name);
  return ds.name == "lm_head" ? &w.lm_head : nullptr;
}

DenseWeights load_dense_weights(const ModelLocation& model, WeightScheme quantized, std::shared_ptr<HugePagePool> memory) {
  model.check_exists();
  const std::string fname = model.file("model.h5");
  std::map<std::string, DenseCacheEntry> cache;
  if (quantized != WeightScheme::Plain && !model.remote())
    cache = read_dense_cache(dense_cache_path(model.str(), quantized), quantized, memory);
  H5Handle file = model.open("model.h5");  // once: from an object store every open costs round trips
  return h5_reading(fname, [&] { return read_dense_weights(file, fname, !model.remote(), quantized, std::move(cache), memory); });
}

void write_tensor(hid_t loc, const std::string& path, const std::vector<int64_t>& shape, const float* data, DType dtype, bool one_chunk,
                  Xxh64* stored) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  if (dtype == DType::F32) {
    h5_write(loc, path, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, one_chunk);
    if (stored) stored->bytes(data, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  std::vector<uint16_t> bits(static_cast<std::size_t>(n));
  f32_to_bf16(data, bits.data(), bits.size());
  h5_write(loc, path, shape, H5T_STD_U16LE, H5T_NATIVE_UINT16, bits.data(), one_chunk);
  if (stored) stored->bytes(bits.data(), bits.size() * sizeof(uint16_t));
}

ModelFileWriter::ModelFileWriter(const std::string& path, const model::ModelConfig& c, const std::string& name)
    : config_(c), path_(name.empty() ? path : name) {
  file_ = h5_open_file(path, H5Mode::Create);
  h5_writing(path_, [&] { write_root_attributes(); });
}

void ModelFileWriter::write_root_attributes() {
  h5_set_attr(file_, "format", std::string("moe-hdf5"));
  // Version 4 and later only where it is needed, so other files stay readable by older builds.
  h5_set_attr(file_, "format_version", model::required_format_version(config_));
  for (const model::ModelAttribute& a : model::model_attributes())
    if (const std::optional<model::AttributeValue> v = a.write(config_))
      std::visit([&](const auto& x) { h5_set_attr(file_, a.name, x); }, *v);
}

void ModelFileWriter::write(const model::DenseDataset& ds, const float* data) {
  h5_writing(path_, [&] {
    Xxh64 sum;
    write_tensor(file_, ds.path, ds.shape, data, ds.float32 ? DType::F32 : config_.dtype, false, &sum);
    h5_set_attr_uint64(h5_open_object(file_, ds.path), "xxh64", sum.digest());
  });
}

void ModelFileWriter::write(const std::string& dataset, const std::vector<int64_t>& shape, const float* data) {
  h5_writing(path_, [&] {
    Xxh64 sum;
    write_tensor(file_, dataset, shape, data, config_.dtype, false, &sum);
    h5_set_attr_uint64(h5_open_object(file_, dataset), "xxh64", sum.digest());
  });
}

void ModelFileWriter::set_shard_identities(const std::vector<uint64_t>& ids) {
  h5_writing(path_, [&] {
    h5_write(file_, "/expert_shards", {static_cast<int64_t>(ids.size())}, H5T_STD_U64LE, H5T_NATIVE_UINT64, ids.data(), false);
  });
}

void ModelFileWriter::set_attr(const std::string& name, int64_t value) {
  h5_writing(path_, [&] { h5_set_attr(file_, name, value); });
}
void ModelFileWriter::set_attr(const std::string& name, const std::string& value) {
  h5_writing(path_, [&] { h5_set_attr(file_, name, value); });
}
void ModelFileWriter::close() {
  h5_close_written(file_, path_);
}

}  // namespace moerun::io
