// experts-index.bin: "MOERUNXI", a little-endian uint64 header length, a JSON header {"version": 1,
// "files": [{"name", "size", "mtime_ns", "ctime_ns", "inode", "device"}] (model.h5 first, then the shards),
// "experts": N, "parts": P, "identities": [...]}, N records of (int32 shard, uint32 0, uint64 xxh64,
// uint64 offset[P]), and the xxh64 of every byte before it.
#include "io/expert_index_cache.hpp"

#include <sys/stat.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/xxh64.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"
#include "io/output_file.hpp"

namespace moerun::io {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'U', 'N', 'X', 'I'};

// What ties the cache to a file: a rewrite changes its size, its modification or change time (the
// latter no user can set) or its inode.
nlohmann::json file_stat(const std::string& dir, const std::string& name) {
  struct stat st {};
  if (::stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return nullptr;
  auto ns = [](const timespec& t) { return static_cast<uint64_t>(t.tv_sec) * 1000000000ULL + static_cast<uint64_t>(t.tv_nsec); };
  return {{"name", name},
          {"size", static_cast<uint64_t>(st.st_size)},
          {"mtime_ns", ns(st.st_mtim)},
          {"ctime_ns", ns(st.st_ctim)},
          {"inode", static_cast<uint64_t>(st.st_ino)},
          {"device", static_cast<uint64_t>(st.st_dev)}};
}

// model.h5 and the shards as they are now; null when one cannot be stat'ed.
nlohmann::json current_files(const std::string& dir, const std::vector<std::string>& shard_files) {
  nlohmann::json files = nlohmann::json::array({file_stat(dir, "model.h5")});
  for (const std::string& name : shard_files) files.push_back(file_stat(dir, name));
  for (const nlohmann::json& f : files)
    if (f.is_null()) return nullptr;
  return files;
}

struct Parsed {
  nlohmann::json header;
  std::string records;
};

// The header and records of an intact file, or nullopt.
std::optional<Parsed> parse(const std::string& path) {
  const std::string bytes = read_regular_file(path);
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kMagic, 8) != 0) return std::nullopt;
  uint64_t header_bytes = 0, sum = 0;
  std::memcpy(&header_bytes, bytes.data() + 8, 8);
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (header_bytes > bytes.size() - 24 || Xxh64().bytes(bytes.data(), bytes.size() - 8).digest() != sum) return std::nullopt;
  Parsed p;
  p.header = parse_json(bytes.substr(16, header_bytes), path);
  p.records = bytes.substr(16 + header_bytes, bytes.size() - 24 - header_bytes);
  return p;
}

std::size_t record_bytes(std::size_t parts) {
  return 16 + 8 * parts;
}

}  // namespace

std::string expert_index_cache_path(const std::string& model_dir) {
  return model_dir + "/experts-index.bin";
}

bool expert_index_cache_current(const std::string& model_dir, const std::vector<std::string>& shard_files) {
  try {
    const std::optional<Parsed> p = parse(expert_index_cache_path(model_dir));
    const nlohmann::json now = current_files(model_dir, shard_files);
    return p && !now.is_null() && p->header.at("version").get<int>() == 1 && p->header.at("files") == now;
  } catch (const std::exception&) {
    return false;
  }
}

std::optional<ExpertIndex> read_expert_index_cache(const std::string& model_dir, const std::vector<std::string>& shard_files,
                                                   int64_t experts, std::size_t parts) {
  const std::string path = expert_index_cache_path(model_dir);
  try {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    const std::optional<Parsed> p = parse(path);
    const nlohmann::json now = current_files(model_dir, shard_files);
    if (!p || now.is_null()) return std::nullopt;
    const nlohmann::json& h = p->header;
    if (h.at("version").get<int>() != 1 || h.at("files") != now || h.at("experts").get<int64_t>() != experts ||
        h.at("parts").get<std::size_t>() != parts || parts > static_cast<std::size_t>(kMaxExpertParts) ||
        p->records.size() != static_cast<std::size_t>(experts) * record_bytes(parts))
      return std::nullopt;
    ExpertIndex index;
    index.identities = h.at("identities").get<std::vector<uint64_t>>();
    if (index.identities.size() != shard_files.size()) return std::nullopt;
    index.locations.resize(static_cast<std::size_t>(experts));
    for (std::size_t i = 0; i < index.locations.size(); ++i) {
      const char* r = p->records.data() + i * record_bytes(parts);
      ExpertLocation& loc = index.locations[i];
      int32_t shard = 0;
      std::memcpy(&shard, r, 4);
      if (shard < 0 || static_cast<std::size_t>(shard) >= shard_files.size()) return std::nullopt;
      loc.shard_index = shard;
      loc.shard = shard_files[static_cast<std::size_t>(shard)];
      std::memcpy(&loc.xxh64, r + 8, 8);
      std::memcpy(loc.offset, r + 16, 8 * parts);
      loc.raw_chunks = true;
    }
    return index;
  } catch (const std::exception& e) {
    log::debug(path, ": not used (", e.what(), ")");
    return std::nullopt;
  }
}

bool write_expert_index_cache(const std::string& model_dir, const std::vector<std::string>& shard_files, const ExpertIndex& index,
                              std::size_t parts) {
  const std::string path = expert_index_cache_path(model_dir);
  const nlohmann::json files = current_files(model_dir, shard_files);
  if (files.is_null() || parts > static_cast<std::size_t>(kMaxExpertParts)) return false;
  std::string records;
  for (const ExpertLocation& loc : index.locations) {
    if (!loc.raw_chunks) return false;  // such a model reads through HDF5: its shards stay probed
    char r[16 + 8 * kMaxExpertParts] = {};
    const auto shard = static_cast<int32_t>(loc.shard_index);
    std::memcpy(r, &shard, 4);
    std::memcpy(r + 8, &loc.xxh64, 8);
    std::memcpy(r + 16, loc.offset, 8 * parts);
    records.append(r, record_bytes(parts));
  }
  const std::string header =
      nlohmann::json{
          {"version", 1}, {"files", files}, {"experts", index.locations.size()}, {"parts", parts}, {"identities", index.identities}}
          .dump();
  std::string bytes(kMagic, 8);
  const uint64_t n = header.size();
  bytes.append(reinterpret_cast<const char*>(&n), 8);
  bytes += header;
  bytes += records;
  const uint64_t sum = Xxh64().bytes(bytes.data(), bytes.size()).digest();
  bytes.append(reinterpret_cast<const char*>(&sum), 8);
  try {
    AtomicFile out(path);
    out.write(bytes);
    out.commit();
  } catch (const Error& e) {
    log::debug("the expert index is not kept (", e.what(), ")");
    return false;
  }
  return true;
}

}  // namespace moerun::io
