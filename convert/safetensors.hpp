// Safetensors files, Hugging Face's weight format: an 8-byte little-endian header length N, N
// bytes of JSON ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then
// the tensors' bytes. Tensors are read with pread one at a time, so memory stays bounded by the
// largest tensor whatever the file's size, and nothing is mapped (an address-space limit holds).
// Everything in the header is checked against the file before it is used: BadInput naming the file
// and the tensor (a truncated file, offsets outside the data, a size that does not match the shape).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moerun::convert {

struct SafetensorInfo {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "I64", ... as in the header
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  int64_t elements() const;
};

// Bytes per element of a safetensors dtype; 0 when unknown.
std::size_t safetensors_dtype_size(const std::string& dtype);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // Io if unreadable, BadInput if malformed
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;

  const std::string& path() const { return path_; }
  // The file's identity as the file system sees it when opened: size, inode, modification and
  // status-change times (the last is set by the kernel on every write and cannot be set back by
  // `touch`). A file changed in place or replaced gets another; convert's fingerprint uses it.
  uint64_t identity() const { return identity_; }
  const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
  const SafetensorInfo& info(const std::string& name) const;  // BadInput when absent
  // A floating-point tensor (F32, BF16 or F16) as float32.
  // `index` >= 0: only slice `index` along the first dimension (one expert of a fused [E, ...] tensor).
  std::vector<float> read_f32(const std::string& name, int64_t index = -1) const;
  // Its raw little-endian bytes as stored (or one slice's).
  std::vector<unsigned char> read_raw(const std::string& name, int64_t index = -1) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  uint64_t identity_ = 0;
  std::map<std::string, SafetensorInfo> tensors_;
};

}  // namespace moerun::convert
