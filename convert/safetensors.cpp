// Safetensors reader: header validation and pread of one tensor at a time.
#include "convert/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/xxh64.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"

namespace moerun::convert {
namespace {

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // the format's own limit is 100 MB
constexpr int64_t kMaxElements = int64_t{1} << 40;

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void pread_full(int fd, void* dst, std::size_t n, uint64_t off, const std::string& path, const std::string& what) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(ErrorKind::Io, path, ": ", what, ": read failed: ", std::strerror(errno));
    if (r == 0) fail(ErrorKind::BadInput, path, ": ", what, ": the file ends early (truncated?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

}  // namespace

int64_t SafetensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO named model.safetensors must not wait for a writer (fstat refuses it).
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail(ErrorKind::Io, path, ": cannot open: ", std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd_, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail(ErrorKind::BadInput, path, ": is ", io::file_type_name(sb.st_mode), ", expected a regular file");
  }
  identity_ = Xxh64()
                  .value(static_cast<uint64_t>(sb.st_size))
                  .value(static_cast<uint64_t>(sb.st_ino))
                  .value(static_cast<int64_t>(sb.st_mtim.tv_sec))
                  .value(static_cast<int64_t>(sb.st_mtim.tv_nsec))
                  .value(static_cast<int64_t>(sb.st_ctim.tv_sec))
                  .value(static_cast<int64_t>(sb.st_ctim.tv_nsec))
                  .digest();
  try {
    const uint64_t size = static_cast<uint64_t>(sb.st_size);
    if (size < 8) fail(ErrorKind::BadInput, path, ": ", size, " bytes, too short for a safetensors file (truncated?)");
    unsigned char len_bytes[8];
    pread_full(fd_, len_bytes, 8, 0, path, "header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len_bytes[i];
    if (n > kMaxHeader) fail(ErrorKind::BadInput, path, ": header length ", n, " is beyond the format's 100 MB (not a safetensors file?)");
    if (n > size - 8) fail(ErrorKind::BadInput, path, ": header of ", n, " bytes but the file has ", size, " (truncated?)");
    std::string header(n, '\0');
    pread_full(fd_, header.data(), n, 8, path, "header");
    data_start_ = 8 + n;
    const uint64_t data_size = size - data_start_;
    const nlohmann::json j = io::parse_json(header, path + ": header");
    if (!j.is_object()) fail(ErrorKind::BadInput, path, ": the header is not a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      const std::string& name = it.key();
      const nlohmann::json& t = it.value();
      auto bad = [&](const std::string& why) { fail(ErrorKind::BadInput, path, ": tensor ", name, ": ", why); };
      if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") || !t["shape"].is_array() ||
          !t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2)
        bad("header entry lacks dtype, shape or data_offsets");
      SafetensorInfo info;
      info.name = name;
      info.dtype = t["dtype"].get<std::string>();
      const std::size_t es = safetensors_dtype_size(info.dtype);
      if (es == 0) bad("unknown dtype " + info.dtype);
      int64_t elements = 1;
      for (const auto& s : t["shape"]) {
        if (!s.is_number_unsigned() || s.get<uint64_t>() > static_cast<uint64_t>(kMaxElements)) bad("shape is not a list of sizes");
        info.shape.push_back(s.get<int64_t>());
        if (info.shape.back() > 0 && elements > kMaxElements / info.shape.back()) bad("more than 2^40 elements");
        elements *= info.shape.back();
      }
      for (const auto& o : t["data_offsets"])
        if (!o.is_number_unsigned()) bad("data_offsets are not byte offsets");
      info.begin = t["data_offsets"][0].get<uint64_t>();
      info.end = t["data_offsets"][1].get<uint64_t>();
      if (info.begin > info.end) bad("data_offsets run backwards");
      if (info.end - info.begin != static_cast<uint64_t>(elements) * es)
        bad("holds " + std::to_string(info.end - info.begin) + " bytes, its shape and dtype need " +
            std::to_string(static_cast<uint64_t>(elements) * es));
      if (info.end > data_size)
        bad("data ends at byte " + std::to_string(data_start_ + info.end) + " but the file has " + std::to_string(size) + " (truncated?)");
      tensors_.emplace(name, std::move(info));
    }
    // No two tensors may share bytes: an alias (w1 over w3) would convert silently into a wrong model.
    std::vector<const SafetensorInfo*> by_offset;
    for (const auto& [name, info] : tensors_)
      if (info.end > info.begin) by_offset.push_back(&info);
    std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < by_offset.size(); ++i)
      if (by_offset[i]->begin < by_offset[i - 1]->end)
        fail(ErrorKind::BadInput, path, ": tensor ", by_offset[i]->name, ": data_offsets [", by_offset[i]->begin, ", ", by_offset[i]->end,
             ") overlap those of ", by_offset[i - 1]->name, " [", by_offset[i - 1]->begin, ", ", by_offset[i - 1]->end, ")");
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_start_(o.data_start_),
      identity_(o.identity_),
      tensors_(std::move(o.tensors_)) {}

const SafetensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(ErrorKind::BadInput, path_, ": has no tensor ", name);
  return it->second;
}

namespace {
// Byte range of slice `index` along the first dimension (-1: the whole tensor).
std::pair<uint64_t, std::size_t> slice_of(const SafetensorInfo& t, int64_t index, const std::string& path) {
  const uint64_t bytes = t.end - t.begin;
  if (index < 0) return {t.begin, static_cast<std::size_t>(bytes)};
  if (t.shape.empty() || index >= t.shape[0])
    fail(ErrorKind::BadInput, path, ": tensor ", t.name, " has no slice ", index, " along its first dimension");
  const uint64_t each = bytes / static_cast<uint64_t>(t.shape[0]);
  return {t.begin + each * static_cast<uint64_t>(index), static_cast<std::size_t>(each)};
}
}  // namespace

std::vector<unsigned char> SafetensorsFile::read_raw(const std::string& name, int64_t index) const {
  const SafetensorInfo& t = info(name);
  const auto [begin, bytes] = slice_of(t, index, path_);
  std::vector<unsigned char> out(bytes);
  pread_full(fd_, out.data(), out.size(), data_start_ + begin, path_, "tensor " + name);
  return out;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name, int64_t index) const {
  const SafetensorInfo& t = info(name);
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    fail(ErrorKind::BadInput, path_, ": tensor ", name, " has dtype ", t.dtype, ", expected F32, BF16 or F16");
  const auto [begin, bytes] = slice_of(t, index, path_);
  const std::size_t n = bytes / (t.dtype == "F32" ? 4 : 2);
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    pread_full(fd_, out.data(), n * 4, data_start_ + begin, path_, "tensor " + name);
    return out;
  }
  std::vector<uint16_t> half(n);
  pread_full(fd_, half.data(), n * 2, data_start_ + begin, path_, "tensor " + name);
  if (t.dtype == "BF16")
    bf16_to_f32(half.data(), out.data(), n);
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_f32(half[i]);
  return out;
}

}  // namespace moerun::convert
