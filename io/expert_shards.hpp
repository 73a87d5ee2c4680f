// Expert shards (experts-NNNNN.h5, DESIGN §3): the index of which shard holds which (layer, expert),
// built and validated from the files' metadata, expert loading with xxh64 verification, and the
// writer used by synth/convert (one chunk per matrix, checksum attribute per expert group).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "io/hdf5.hpp"
#include "model/model_config.hpp"
#include "io/model_location.hpp"
#include "io/positional_file.hpp"

namespace moerun::io {

// One tensor of an expert's raw form, which concatenates them in this order: w1 [ff, d], w3 [ff, d],
// w2 [d, ff], then with expert biases b1 [ff], b3 [ff], b2 [d] (format version 3). All as stored.
// Quantized experts store each matrix as its values and then its scales ("w1", "w1_scales", "w3",
// ...): q8/q4 (version 4) as quantize_rows lays them out, mxfp4 and fp8-block (version 5) as the
// checkpoints ship them (base/native_quant.hpp), int4 (version 9) as values, scales and then level
// bytes ("w1_levels"; base/quant_format.hpp); biases in the dtype.
enum class PartElem {
  Dense,  // the model's dtype (float32, or bfloat16 bits as uint16)
  Int8,  // q8 values
  Uint8,  // q4, int4 and mxfp4 values, two per byte
  Fp16,  // q8/q4 scales (and q4's minimums): IEEE half bits as uint16
  E8m0,  // mxfp4 scales: one byte, 2^(s - 127); 255 is NaN
  E4m3,  // fp8-block values: float8 e4m3fn bits; 0x7f and 0xff are NaN
  F32,  // fp8-block scales: float32 per 128x128 block, whatever the model's dtype
  Scale16,  // int4 scales: bf16 or fp16 bits as uint16, which one its level byte says
  Level,  // int4 level bytes: zero level in bits 0-3, bit 7 set for an fp16 scale
};
struct ExpertPart {
  const char* name;  // dataset in the expert's group: "w1"
  std::vector<int64_t> shape;
  PartElem elem = PartElem::Dense;
  std::size_t offset = 0, bytes = 0;  // in the raw form
};
inline constexpr int kMaxExpertParts = 12;  // int4's three parts per matrix, and biases
std::vector<ExpertPart> expert_raw_parts(const model::ModelConfig& c);
// The part called `name` ("w2_scales"); Internal if this format has none.
const ExpertPart& expert_part(const std::vector<ExpertPart>& parts, const std::string& name);

struct ExpertLocation {
  std::string shard;  // path or s3:// URL of the shard file
  int shard_index = -1;
  uint64_t xxh64 = 0;  // expected checksum of the raw form's bytes
  // File offsets of the parts' chunks when each is one unfiltered chunk (the DESIGN layout): local
  // shards are then read by pread, remote ones by ranged GETs, instead of through HDF5.
  bool raw_chunks = false;
  uint64_t offset[kMaxExpertParts] = {};
};

// Where an expert's raw bytes come from (the L3 tier): local shards, or an object store. The raw
// form is w1‖w3‖w2 as stored (the bytes xxh64 covers); read_raw does not verify, callers do
// (verify_expert) so that every tier reports a mismatch the same way. Thread-safe.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual const model::ModelConfig& config() const = 0;
  virtual AlignedBuffer read_raw(int64_t layer, int64_t expert) const = 0;
  // The same into `raw`, which keeps its memory from load to load (a loader's buffer).
  virtual void read_raw_into(int64_t layer, int64_t expert, AlignedBuffer& raw) const { raw = read_raw(layer, expert); }
  virtual uint64_t checksum(int64_t layer, int64_t expert) const = 0;
  virtual std::string where(int64_t layer, int64_t expert) const = 0;  // the file (or URL) that holds it
};

// Bytes of one expert's raw form.
std::size_t expert_raw_bytes(const model::ModelConfig& c);
// BadInput naming `where` and the expert's group on a NaN/Inf or a checksum mismatch.
void verify_expert(const void* raw, const model::ModelConfig& c, uint64_t expected_xxh64, const std::string& where, int64_t layer,
                   int64_t expert);

class ExpertShardIndex : public ExpertSource {
 public:
  // Scans the model's experts-*.h5 and checks: every (layer, expert) in exactly one shard, group
  // names plain decimal integers in range, w1/w3/w2 present with the right shape and dtype, xxh64
  // attribute set.
  static ExpertShardIndex build(const ModelLocation& model, const model::ModelConfig& config);

  const ExpertLocation& locate(int64_t layer, int64_t expert) const;
  const std::vector<std::string>& shards() const { return shards_; }
  // Each shard's identity (shard_identity over the experts it holds), in shards() order.
  const std::vector<uint64_t>& shard_identities() const { return identities_; }
  // Requests one remote expert read takes (1 when its three chunks are adjacent); 0 for local.
  int requests_per_expert(int64_t layer, int64_t expert) const;

  // Reads one expert's raw form (w1[ff, d] ‖ w3[ff, d] ‖ w2[d, ff] as stored) and verifies it (NaN
  // scan and checksum; BadInput naming shard and group). Turning bytes into a resident form is the
  // expert backend's business.
  AlignedBuffer load_raw(int64_t layer, int64_t expert) const;

  // Keeps this index next to a local model (experts-index.bin, io/expert_index_cache.hpp) for the
  // next build; build() does after a walk, which cannot while model.h5 is missing (convert writes
  // it last, and calls this then). Nothing for a remote model; never an error.
  void keep() const;

  // Local shards: read experts with O_DIRECT where the file system allows (the expert cache: L1
  // holds them, the page cache would hold them twice). Set-up only, before any read.
  void set_direct_reads(bool direct);

  const model::ModelConfig& config() const override { return config_; }
  AlignedBuffer read_raw(int64_t layer, int64_t expert) const override;
  void read_raw_into(int64_t layer, int64_t expert, AlignedBuffer& raw) const override;
  uint64_t checksum(int64_t layer, int64_t expert) const override { return locate(layer, expert).xxh64; }
  std::string where(int64_t layer, int64_t expert) const override { return locate(layer, expert).shard; }

 private:
  model::ModelConfig config_;
  ModelLocation model_{std::string()};
  std::vector<std::string> shards_;  // display names (paths or URLs)
  std::vector<std::string> shard_files_;  // names inside the model location
  std::vector<ExpertLocation> locations_;  // [layer * num_experts + expert]
  std::vector<uint64_t> identities_;
  mutable std::map<std::string, std::shared_ptr<H5Handle>> open_files_;  // guarded by hdf5_mutex()
  std::vector<std::shared_ptr<const PositionalFile>> local_files_;  // [shard] of a local model
};

std::string expert_group_path(int64_t layer, int64_t expert);
// In an open shard file `fname` (hdf5_mutex held): checks the group of (layer, expert) has the
// parts of expert_raw_parts with their shapes and types, and returns its xxh64 attribute; BadInput naming file and group.
uint64_t check_expert_group(hid_t file, const std::string& fname, int64_t layer, int64_t expert, const model::ModelConfig& c);
// Reads the group's raw form (expert_raw_parts) into `raw` (expert_raw_bytes(c) bytes), without verifying.
void read_expert_group(hid_t file, int64_t layer, int64_t expert, const model::ModelConfig& c, void* raw);
std::string shard_file_name(int index);  // "experts-00003.h5"

// What binds a shard to its model (format version 2): xxh64 over the (layer, expert, xxh64
// attribute) of every expert the shard holds, in (layer, expert) order. model.h5 records it per
// shard; a shard of another model, or one whose experts changed, has another.
struct ShardEntry {
  int64_t layer = 0, expert = 0;
  uint64_t xxh64 = 0;
};
uint64_t shard_identity(std::vector<ShardEntry> entries);

class ExpertShardWriter {
 public:
  ExpertShardWriter(const std::string& path, const model::ModelConfig& config, const std::string& name = "");  // name: as ModelFileWriter
  // Float32 inputs, stored in the config's dtype, or quantized to its expert format (the matrices;
  // biases stay in the dtype). w1/w3: [ff, d]; w2: [d, ff]; `bias` b1‖b3‖b2 ([ff], [ff], [d]) when
  // the config has expert biases, else null.
  void write(int64_t layer, int64_t expert, const float* w1, const float* w3, const float* w2, const float* bias = nullptr);
  // An expert already in its raw form (expert_raw_parts: as stored, e.g. MXFP4 blocks as shipped).
  void write_raw(int64_t layer, int64_t expert, const void* raw);
  void set_attr(const std::string& name, const std::string& value);  // a root attribute
  void close();  // as ModelFileWriter::close

 private:
  void write_group(int64_t layer, int64_t expert, const float* w1, const float* w3, const float* w2, const float* bias);
  void write_raw_group(int64_t layer, int64_t expert, const unsigned char* raw);
  model::ModelConfig config_;
  std::string path_;
  H5Handle file_;
};

}  // namespace moerun::io
