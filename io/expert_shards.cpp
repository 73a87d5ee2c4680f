// Expert shard index, loader and writer.
#include "io/expert_shards.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <mutex>

#include "base/native_quant.hpp"
#include "base/xxh64.hpp"
#include "io/expert_index_cache.hpp"
#include "io/model_file.hpp"

namespace moerun::io {
namespace {

bool parse_index(const std::string& s, int64_t limit, int64_t* out) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  if (s.size() > 1 && s[0] == '0') return false;
  *out = std::stoll(s);
  return *out < limit;
}

}  // namespace

std::string expert_group_path(int64_t layer, int64_t expert) {
  return "/layers/" + std::to_string(layer) + "/experts/" + std::to_string(expert);
}

std::string shard_file_name(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "experts-%05d.h5", index);
  return buf;
}

std::size_t part_elem_size(PartElem e, DType dense) {
  switch (e) {
    case PartElem::Dense: return dtype_size(dense);
    case PartElem::Fp16:
    case PartElem::Scale16: return 2;
    case PartElem::F32: return 4;
    default: return 1;
  }
}

std::vector<ExpertPart> expert_raw_parts(const model::ModelConfig& c) {
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  const WeightScheme s = c.expert_format.scheme;
  std::vector<ExpertPart> parts;
  if (s != WeightScheme::Plain) {
    for (auto [name, scales, levels, rows, cols] :
         {std::tuple{"w1", "w1_scales", "w1_levels", ff, d}, std::tuple{"w3", "w3_scales", "w3_levels", ff, d},
          std::tuple{"w2", "w2_scales", "w2_levels", d, ff}}) {
      switch (s) {
        case WeightScheme::Mxfp4:
          parts.push_back({name, {rows, cols / 2}, PartElem::Uint8});
          parts.push_back({scales, {rows, cols / kMxfp4Block}, PartElem::E8m0});
          break;
        case WeightScheme::Fp8Block:
          parts.push_back({name, {rows, cols}, PartElem::E4m3});
          parts.push_back({scales, {fp8_scale_rows(rows), fp8_scale_cols(cols)}, PartElem::F32});
          break;
        case WeightScheme::Int4:  // the levels right after the scales: base/weight_dequant.hpp reads them there
          parts.push_back({name, {rows, cols / 2}, PartElem::Uint8});
          parts.push_back({scales, {rows, cols / kQuantGroup}, PartElem::Scale16});
          parts.push_back({levels, {rows, cols / kQuantGroup}, PartElem::Level});
          break;
        default:
          parts.push_back({name, {rows, quant_row_bytes(s, cols)}, s == WeightScheme::Q8 ? PartElem::Int8 : PartElem::Uint8});
          parts.push_back({scales, {rows, quant_row_scales(s, cols)}, PartElem::Fp16});
      }
    }
  } else {
    parts = {{"w1", {ff, d}}, {"w3", {ff, d}}, {"w2", {d, ff}}};
  }
  if (c.expert_bias)
    for (auto [name, n] : {std::pair{"b1", ff}, std::pair{"b3", ff}, std::pair{"b2", d}}) parts.push_back({name, {n}});
  std::size_t offset = 0;
  for (ExpertPart& p : parts) {
    int64_t n = 1;
    for (int64_t v : p.shape) n *= v;
    p.offset = offset;
    p.bytes = static_cast<std::size_t>(n) * part_elem_size(p.elem, c.dtype);
    offset += p.bytes;
  }
  return parts;
}

const ExpertPart& expert_part(const std::vector<ExpertPart>& parts, const std::string& name) {
  for (const ExpertPart& p : parts)
    if (name == p.name) return p;
  fail(ErrorKind::Internal, "expert part ", name, " is not in this format");
}

namespace {
// HDF5's element types for a part: in memory, and what the file holds.
struct PartTypes {
  hid_t mem, file;
};
PartTypes part_types(PartElem e, DType dense) {
  switch (e) {
    case PartElem::Int8: return {H5T_NATIVE_INT8, H5T_STD_I8LE};
    case PartElem::Uint8:
    case PartElem::Level:
    case PartElem::E8m0:
    case PartElem::E4m3: return {H5T_NATIVE_UINT8, H5T_STD_U8LE};
    case PartElem::Fp16:
    case PartElem::Scale16: return {H5T_NATIVE_UINT16, H5T_STD_U16LE};
    case PartElem::F32: return {H5T_NATIVE_FLOAT, H5T_IEEE_F32LE};
    default: return dense == DType::F32 ? PartTypes{H5T_NATIVE_FLOAT, H5T_IEEE_F32LE} : PartTypes{H5T_NATIVE_UINT16, H5T_STD_U16LE};
  }
}
void expect_part(hid_t file, const std::string& fname, const std::string& path, const ExpertPart& p, DType dense) {
  if (p.elem == PartElem::Dense) return expect_dataset(file, fname, path, p.shape, dense);
  if (p.elem == PartElem::F32) return expect_dataset(file, fname, path, p.shape, DType::F32);
  const bool is_signed = p.elem == PartElem::Int8;
  const std::size_t size = part_elem_size(p.elem, dense);
  const char* want = p.elem == PartElem::Int8      ? "int8"
                     : p.elem == PartElem::Fp16    ? "uint16 (fp16 bits)"
                     : p.elem == PartElem::Scale16 ? "uint16 (bf16 or fp16 bits)"
                                                   : "uint8";
  expect_dataset_type(file, fname, path, p.shape, {H5T_INTEGER, size, is_signed}, want);
}
}  // namespace

uint64_t check_expert_group(hid_t file, const std::string& fname, int64_t layer, int64_t expert, const model::ModelConfig& c) {
  const std::string gp = expert_group_path(layer, expert);
  for (const ExpertPart& p : expert_raw_parts(c)) expect_part(file, fname, gp + "/" + p.name, p, c.dtype);
  H5Handle group = h5_open_object(file, gp);
  std::optional<uint64_t> sum;
  try {
    sum = h5_attr_uint64(group, "xxh64");
  } catch (const Error& err) {
    fail(ErrorKind::BadInput, fname, ": ", gp, ": ", err.what());
  }
  if (!sum) fail(ErrorKind::BadInput, fname, ": ", gp, " has no xxh64 attribute");
  return *sum;
}

void read_expert_group(hid_t file, int64_t layer, int64_t expert, const model::ModelConfig& c, void* raw) {
  const std::string gp = expert_group_path(layer, expert);
  auto* b = static_cast<unsigned char*>(raw);
  for (const ExpertPart& p : expert_raw_parts(c)) h5_read(file, gp + "/" + p.name, part_types(p.elem, c.dtype).mem, b + p.offset);
}

uint64_t shard_identity(std::vector<ShardEntry> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const ShardEntry& a, const ShardEntry& b) { return a.layer != b.layer ? a.layer < b.layer : a.expert < b.expert; });
  Xxh64 h;
  h.text("moe-hdf5 shard");
  for (const ShardEntry& e : entries) h.value(e.layer).value(e.expert).value(e.xxh64);
  return h.digest();
}

namespace {
// Format version 2: every shard is the one model.h5 recorded (count and identity), so shards of
// another model of the same shapes, or a changed shard, are refused by name.
void check_shard_identities(const ExpertShardIndex& idx, const ModelLocation& model, const model::ModelConfig& c) {
  if (c.shard_ids.empty()) return;
  const auto& names = idx.shards();
  if (names.size() != c.shard_ids.size())
    fail(ErrorKind::BadInput, model.str(), ": has ", names.size(), " expert shard(s) (experts-*.h5), but ", model.file("model.h5"),
         " records ", c.shard_ids.size(), " (a shard missing, or one left from another model)");
  for (std::size_t s = 0; s < names.size(); ++s)
    if (idx.shard_identities()[s] != c.shard_ids[s])
      fail(ErrorKind::BadInput, names[s], ": is not the shard ", model.file("model.h5"), " was written with (its experts' xxh64 ",
           "attributes differ from model.h5's record: a shard of another model, or a changed one)");
}
}  // namespace

ExpertShardIndex ExpertShardIndex::build(const ModelLocation& model, const model::ModelConfig& c) {
  ExpertShardIndex idx;
  idx.config_ = c;
  idx.model_ = model;
  model.check_exists();
  idx.shard_files_ = model.shard_names();
  const std::vector<ExpertPart> parts = expert_raw_parts(c);

  const int64_t total = c.num_expert_slots();
  for (const std::string& name : idx.shard_files_) idx.shards_.push_back(model.file(name));
  // A local model whose files have not changed since the last walk: its index as kept.
  if (!model.remote()) {
    std::optional<ExpertIndex> kept = read_expert_index_cache(model.str(), idx.shard_files_, total, parts.size());
    // The shards model.h5 records (when it does): otherwise a file rewritten within one tick of the
    // clock, at its old size and inode, and the index is walked again.
    if (kept && (c.shard_ids.empty() || kept->identities == c.shard_ids)) {
      idx.locations_ = std::move(kept->locations);
      for (ExpertLocation& loc : idx.locations_) loc.shard = idx.shards_[static_cast<std::size_t>(loc.shard_index)];
      idx.identities_ = std::move(kept->identities);
      idx.set_direct_reads(false);
      return idx;
    }
  }
  idx.locations_.assign(static_cast<std::size_t>(total), {});
  for (std::size_t si = 0; si < idx.shard_files_.size(); ++si) {
    const std::string fname = idx.shards_[si];
    H5Handle file = model.open(idx.shard_files_[si]);
    std::vector<ShardEntry> entries;
    h5_reading(fname, [&] {
      if (!h5_exists(file, "/layers")) return;  // an empty shard is allowed
      for (const std::string& ls : h5_children(file, "/layers")) {
        int64_t l;
        if (!parse_index(ls, c.num_moe_layers(), &l))
          fail(ErrorKind::BadInput, fname, ": group /layers/", ls, " is not a MoE layer index in [0, ", c.num_moe_layers(), ")");
        const std::string lp = "/layers/" + ls + "/experts";
        if (!h5_exists(file, lp)) continue;
        for (const std::string& es : h5_children(file, lp)) {
          int64_t e;
          if (!parse_index(es, c.num_experts, &e))
            fail(ErrorKind::BadInput, fname, ": group ", lp, "/", es, " is not an expert index in [0, ", c.num_experts, ")");
          const std::string gp = expert_group_path(l, e);
          ExpertLocation& loc = idx.locations_[static_cast<std::size_t>(l * c.num_experts + e)];
          if (!loc.shard.empty()) fail(ErrorKind::BadInput, fname, ": ", gp, " is also in ", loc.shard);
          loc.xxh64 = check_expert_group(file, fname, l, e, c);
          entries.push_back({l, e, loc.xxh64});
          loc.shard = fname;
          loc.shard_index = static_cast<int>(si);
          // Stored little-endian as the format says, one raw chunk each: the bytes in the file are
          // the bytes xxh64 covers, so a pread or a ranged GET needs no HDF5 at all.
          loc.raw_chunks = true;
          for (std::size_t m = 0; m < parts.size() && loc.raw_chunks; ++m) {
            const std::string ds = gp + "/" + parts[m].name;
            const auto ext = h5_single_chunk(file, ds);
            loc.raw_chunks = ext && ext->size == parts[m].bytes && ext->filter_mask == 0 && h5_filter_count(file, ds) == 0;
            if (loc.raw_chunks) loc.offset[m] = ext->address;
          }
        }
      }
    });
    idx.identities_.push_back(shard_identity(std::move(entries)));
  }
  for (int64_t l = 0; l < c.num_moe_layers(); ++l)
    for (int64_t e = 0; e < c.num_experts; ++e)
      if (idx.locations_[static_cast<std::size_t>(l * c.num_experts + e)].shard.empty())
        fail(ErrorKind::BadInput, model.str(), ": expert ", expert_group_path(l, e), " is in no shard (experts-*.h5)");
  check_shard_identities(idx, model, c);
  idx.keep();
  idx.set_direct_reads(false);
  return idx;
}

void ExpertShardIndex::keep() const {
  if (!model_.remote()) write_expert_index_cache(model_.str(), shard_files_, {locations_, identities_}, expert_raw_parts(config_).size());
}

const ExpertLocation& ExpertShardIndex::locate(int64_t layer, int64_t expert) const {
  if (layer < 0 || layer >= config_.num_moe_layers() || expert < 0 || expert >= config_.num_experts)
    fail(ErrorKind::Internal, "expert (", layer, ", ", expert, ") out of range");
  return locations_[static_cast<std::size_t>(layer * config_.num_experts + expert)];
}

std::size_t expert_raw_bytes(const model::ModelConfig& c) {
  const std::vector<ExpertPart> parts = expert_raw_parts(c);
  return parts.back().offset + parts.back().bytes;
}

namespace {
// The NaN scan of a native part: an E8M0 scale of 255, an e4m3 NaN, a float32 block scale that is
// not finite or would overflow a weight (base/native_quant.hpp's fp8_scale_ok).
void check_native_part(const ExpertPart& p, const unsigned char* data, const std::string& where, const std::string& tensor) {
  const int64_t cols = p.shape[1], n = p.shape[0] * cols;
  for (int64_t i = 0; i < n; ++i) {
    const char* what = nullptr;
    if (p.elem == PartElem::E8m0 && data[i] == kE8m0Nan) what = "an E8M0 scale of 255 (NaN)";
    if (p.elem == PartElem::E4m3 && e4m3_is_nan(data[i])) what = "an e4m3 NaN";
    if (p.elem == PartElem::F32) {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      if (!fp8_scale_ok(v))
        what = std::isfinite(v) ? "a block scale of 2^64 or more (its weights' products overflow float32)"
                                : "a block scale that is NaN or Inf";
    }
    if (what) fail(ErrorKind::BadInput, where, ": ", tensor, " contains ", what, " at [", i / cols, ",", i % cols, "]");
  }
}
// int4's scales with their level bytes (the next part): each level byte a zero level in bits 0-3
// and the fp16 flag in bit 7 only, each scale finite in the type that flag names.
void check_int4_scales(const ExpertPart& p, const unsigned char* data, const std::string& where, const std::string& tensor) {
  const int64_t cols = p.shape[1], n = p.shape[0] * cols;
  const unsigned char* levels = data + p.bytes;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t level = levels[i];
    uint16_t s;
    std::memcpy(&s, data + 2 * i, 2);
    const char* what = nullptr;
    if ((level & ~(kInt4ZeroMask | kInt4F16Scale)) != 0)
      what = "a level byte with bits 4-6 set (only the zero level and the fp16 flag are defined)";
    else if (!std::isfinite((level & kInt4F16Scale) ? f16_to_f32(s) : bf16_to_f32(s)))
      what = "a scale that is NaN or Inf";
    if (what) fail(ErrorKind::BadInput, where, ": ", tensor, " contains ", what, " at [", i / cols, ",", i % cols, "]");
  }
}
}  // namespace

void verify_expert(const void* raw, const model::ModelConfig& c, uint64_t expected, const std::string& where, int64_t layer,
                   int64_t expert) {
  const std::string gp = expert_group_path(layer, expert);
  const auto* b = static_cast<const unsigned char*>(raw);
  // The NaN scan comes first: it names the tensor and element, the checksum cannot.
  for (const ExpertPart& p : expert_raw_parts(c)) {
    if (p.elem == PartElem::Int8 || p.elem == PartElem::Uint8) continue;  // integers are always finite
    if (p.elem == PartElem::Level) continue;  // checked with their scales
    const int64_t rows = p.shape[0], cols = p.shape.size() > 1 ? p.shape[1] : 1;
    const std::string tensor = gp + "/" + p.name;
    switch (p.elem) {
      case PartElem::Fp16: check_finite_fp16(reinterpret_cast<const uint16_t*>(b + p.offset), rows, cols, where, tensor); break;
      case PartElem::Scale16: check_int4_scales(p, b + p.offset, where, tensor); break;
      case PartElem::E8m0:
      case PartElem::E4m3:
      case PartElem::F32: check_native_part(p, b + p.offset, where, tensor); break;
      default: check_finite(b + p.offset, c.dtype, rows, cols, where, tensor);
    }
  }
  const uint64_t sum = Xxh64().bytes(b, expert_raw_bytes(c)).digest();
  if (sum != expected) fail(ErrorKind::BadInput, where, ": ", gp, " checksum mismatch (xxh64 attribute ", expected, ", data ", sum, ")");
}

namespace {
// The byte span [first, end) that covers an expert's chunks, whether they are in raw-form order
// back to back (one GET straight into the buffer), and whether one GET of the span is worth it
// (gaps no larger than twice the expert) rather than one per part.
struct ChunkSpan {
  uint64_t first = 0, end = 0;
  bool contiguous = false, one_request = false;
};
ChunkSpan chunk_span(const ExpertLocation& loc, const std::vector<ExpertPart>& parts) {
  ChunkSpan s;
  s.first = UINT64_MAX;
  s.contiguous = true;
  uint64_t total = 0;
  for (std::size_t m = 0; m < parts.size(); ++m) {
    s.first = std::min(s.first, loc.offset[m]);
    s.end = std::max(s.end, loc.offset[m] + parts[m].bytes);
    s.contiguous = s.contiguous && loc.offset[m] == loc.offset[0] + parts[m].offset;
    total += parts[m].bytes;
  }
  s.one_request = s.end - s.first <= 2 * total;
  return s;
}
}  // namespace

int ExpertShardIndex::requests_per_expert(int64_t layer, int64_t expert) const {
  const ExpertLocation& loc = locate(layer, expert);
  if (!model_.remote()) return 0;
  if (!loc.raw_chunks) return -1;  // through HDF5: depends on its metadata cache
  const std::vector<ExpertPart> parts = expert_raw_parts(config_);
  return chunk_span(loc, parts).one_request ? 1 : static_cast<int>(parts.size());
}

void ExpertShardIndex::set_direct_reads(bool direct) {
  local_files_.clear();
  if (model_.remote()) return;
  for (const std::string& path : shards_) local_files_.push_back(std::make_shared<const PositionalFile>(path, direct));
}

AlignedBuffer ExpertShardIndex::read_raw(int64_t layer, int64_t expert) const {
  AlignedBuffer raw;
  read_raw_into(layer, expert, raw);
  return raw;
}

void ExpertShardIndex::read_raw_into(int64_t layer, int64_t expert, AlignedBuffer& raw) const {
  const ExpertLocation& loc = locate(layer, expert);
  const model::ModelConfig& c = config_;
  const std::vector<ExpertPart> parts = expert_raw_parts(c);
  raw.resize(expert_raw_bytes(c));
  if (loc.raw_chunks) {
    const auto shard = static_cast<std::size_t>(loc.shard_index);
    auto read_at = [&](uint64_t offset, std::size_t n, void* dst) {
      if (model_.remote())
        model_.store()->read(model_.url(shard_files_[shard]), offset, n, dst);
      else
        local_files_[shard]->read(offset, n, dst);
    };
    const ChunkSpan span = chunk_span(loc, parts);
    if (span.contiguous) {
      read_at(span.first, raw.size(), raw.data());
    } else if (span.one_request) {
      // One read of the span, the parts copied out of it in raw order (a local shard's direct read
      // lands in the span buffer itself: one copy of the expert, not two).
      thread_local AlignedBuffer scratch;
      const std::size_t n = span.end - span.first;
      const unsigned char* all = nullptr;
      if (model_.remote()) {
        if (scratch.size() < n) scratch.resize(n);
        read_at(span.first, n, scratch.data());
        all = scratch.as<unsigned char>();
      } else {
        all = local_files_[shard]->read_view(span.first, n, scratch);
      }
      for (std::size_t m = 0; m < parts.size(); ++m)
        std::memcpy(raw.as<unsigned char>() + parts[m].offset, all + (loc.offset[m] - span.first), parts[m].bytes);
    } else {
      for (std::size_t m = 0; m < parts.size(); ++m) read_at(loc.offset[m], parts[m].bytes, raw.as<unsigned char>() + parts[m].offset);
    }
    return;
  }
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  auto& handle = open_files_[loc.shard];
  if (!handle) handle = std::make_shared<H5Handle>(model_.open(shard_files_[static_cast<std::size_t>(loc.shard_index)]));
  h5_reading(loc.shard, [&] { read_expert_group(*handle, layer, expert, c, raw.data()); });
}

AlignedBuffer ExpertShardIndex::load_raw(int64_t layer, int64_t expert) const {
  AlignedBuffer raw = read_raw(layer, expert);
  verify_expert(raw.data(), config_, checksum(layer, expert), where(layer, expert), layer, expert);
  return raw;
}

ExpertShardWriter::ExpertShardWriter(const std::string& path, const model::ModelConfig& c, const std::string& name)
    : config_(c), path_(name.empty() ? path : name), file_(h5_open_file(path, H5Mode::Create)) {
  h5_writing(path_, [&] {
    h5_set_attr(file_, "format", std::string("moe-hdf5-experts"));
    h5_set_attr(file_, "format_version", int64_t{1});
  });
}

void ExpertShardWriter::set_attr(const std::string& name, const std::string& value) {
  h5_writing(path_, [&] { h5_set_attr(file_, name, value); });
}
void ExpertShardWriter::close() {
  h5_close_written(file_, path_);
}

void ExpertShardWriter::write(int64_t layer, int64_t expert, const float* w1, const float* w3, const float* w2, const float* bias) {
  h5_writing(path_, [&] { write_group(layer, expert, w1, w3, w2, bias); });
}

void ExpertShardWriter::write_raw(int64_t layer, int64_t expert, const void* raw) {
  h5_writing(path_, [&] { write_raw_group(layer, expert, static_cast<const unsigned char*>(raw)); });
}

void ExpertShardWriter::write_raw_group(int64_t layer, int64_t expert, const unsigned char* raw) {
  const std::string gp = expert_group_path(layer, expert);
  H5Handle group = h5_create_group(file_, gp);
  for (const ExpertPart& p : expert_raw_parts(config_)) {
    const PartTypes t = part_types(p.elem, config_.dtype);
    h5_write(file_, gp + "/" + p.name, p.shape, t.file, t.mem, raw + p.offset, true);
  }
  h5_set_attr_uint64(group, "xxh64", Xxh64().bytes(raw, expert_raw_bytes(config_)).digest());
}

namespace {
// One float32 matrix [rows, cols] quantized into its parts of the raw form (values, scales, and
// int4's levels).
void quantize_matrix(WeightScheme s, const float* x, int64_t rows, int64_t cols, unsigned char* values, unsigned char* scales,
                     unsigned char* levels) {
  switch (s) {
    case WeightScheme::Mxfp4: return quantize_mxfp4(x, rows, cols / kMxfp4Block, values, scales);
    case WeightScheme::Fp8Block: return quantize_fp8_block(x, rows, cols, values, reinterpret_cast<float*>(scales));
    default: quantize_rows(s, x, rows, cols, values, reinterpret_cast<uint16_t*>(scales), levels);
  }
}
}  // namespace

void ExpertShardWriter::write_group(int64_t layer, int64_t expert, const float* w1, const float* w3, const float* w2, const float* bias) {
  const model::ModelConfig& c = config_;
  if (c.expert_bias != (bias != nullptr))
    fail(ErrorKind::Internal, path_, ": expert biases ", bias ? "given for a model without them" : "missing");
  const float* data[kMaxExpertParts] = {w1, w3, w2};
  const int64_t ff = c.intermediate_size;
  if (bias) {
    data[3] = bias;
    data[4] = bias + ff;
    data[5] = bias + 2 * ff;
  }
  const std::vector<ExpertPart> parts = expert_raw_parts(c);
  const WeightScheme scheme = c.expert_format.scheme;
  if (scheme == WeightScheme::Plain) {
    // One stream over the raw form as stored: the checksum's bytes, without converting them again.
    const std::string gp = expert_group_path(layer, expert);
    H5Handle group = h5_create_group(file_, gp);
    Xxh64 sum;
    for (std::size_t m = 0; m < parts.size(); ++m)
      write_tensor(file_, gp + "/" + parts[m].name, parts[m].shape, data[m], c.dtype, true, &sum);
    h5_set_attr_uint64(group, "xxh64", sum.digest());
    return;
  }
  // Each matrix quantized as a whole (one expert's worth of memory) into the raw form, biases in the dtype.
  std::vector<unsigned char> raw(expert_raw_bytes(c));
  const char* const matrices[] = {"w1", "w3", "w2"};
  for (int m = 0; m < 3; ++m) {
    const std::string name = matrices[m];
    const int64_t rows = m == 2 ? c.hidden_size : c.intermediate_size, cols = m == 2 ? c.intermediate_size : c.hidden_size;
    unsigned char* levels = scheme == WeightScheme::Int4 ? raw.data() + expert_part(parts, name + "_levels").offset : nullptr;
    quantize_matrix(scheme, data[m], rows, cols, raw.data() + expert_part(parts, name).offset,
                    raw.data() + expert_part(parts, name + "_scales").offset, levels);
  }
  const char* const biases[] = {"b1", "b3", "b2"};
  for (int m = 0; bias && m < 3; ++m) {
    const ExpertPart& p = expert_part(parts, biases[m]);
    const int64_t n = p.shape[0];
    if (c.dtype == DType::F32)
      std::memcpy(raw.data() + p.offset, data[3 + m], static_cast<std::size_t>(n) * 4);
    else
      f32_to_bf16(data[3 + m], reinterpret_cast<uint16_t*>(raw.data() + p.offset), static_cast<std::size_t>(n));
  }
  write_raw_group(layer, expert, raw.data());
}

}  // namespace moerun::io
