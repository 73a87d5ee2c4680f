// dense-q8.bin / dense-q4.bin: "MOERUNDQ", a little-endian uint64 header length, a JSON header
// {"version": 1, "scheme": "q4", "matrices": [{"path", "rows", "cols", "offset", "bytes", "xxh64",
// "source_xxh64"}]}, then each matrix's blocked bytes at a 4096-byte aligned offset.
#include "io/dense_quant_cache.hpp"

#include <sys/stat.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/weight_scheme_table.hpp"
#include "base/log.hpp"
#include "base/quant_matmul.hpp"
#include "base/xxh64.hpp"
#include "io/json_input.hpp"
#include "io/output_file.hpp"
#include "io/positional_file.hpp"

namespace moerun::io {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'U', 'N', 'D', 'Q'};
constexpr uint64_t kMaxHeader = uint64_t{16} << 20;
constexpr uint64_t kAlign = 4096;
uint64_t align_up(uint64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

const char* scheme_text(WeightScheme s) {
  return weight_scheme_row(s).name;
}

// One entry of the header into a matrix read from `file`; throws BadInput on anything amiss.
DenseCacheEntry read_entry(const PositionalFile& file, uint64_t file_size, WeightScheme s, const nlohmann::json& e,
                           const std::shared_ptr<HugePagePool>& memory) {
  const auto rows = e.at("rows").get<int64_t>(), cols = e.at("cols").get<int64_t>();
  const auto offset = e.at("offset").get<uint64_t>(), bytes = e.at("bytes").get<uint64_t>();
  if (rows <= 0 || cols <= 0 || cols % 32 != 0 || rows > (int64_t{1} << 24) || cols > (int64_t{1} << 20) ||
      static_cast<int64_t>(bytes) != quant_blocked_bytes(s, rows, cols) || offset % kAlign != 0 || offset > file_size ||
      bytes > file_size - offset)
    fail(ErrorKind::BadInput, "entry ", e.at("path").get<std::string>(), " has inconsistent sizes");
  DenseCacheEntry out;
  out.source_xxh64 = e.at("source_xxh64").get<uint64_t>();
  WeightMatrix& m = out.matrix;
  m.dtype = DType::F32;  // the activations' type; the weights are the scheme's
  m.scheme = s;
  m.rows = rows;
  m.cols = cols;
  m.data.place_in(memory);
  m.data.resize(bytes);
  file.read(offset, bytes, m.data.data());
  if (Xxh64().bytes(m.data.data(), bytes).digest() != e.at("xxh64").get<uint64_t>())
    fail(ErrorKind::BadInput, e.at("path").get<std::string>(), " checksum mismatch");
  const int64_t bad = quant_blocked_find_bad(s, rows, cols, m.data.as<uint8_t>());
  if (bad >= 0)
    fail(ErrorKind::BadInput, "entry: ", e.at("path").get<std::string>(), " scales contain NaN or Inf (scale ", bad, " in block order)");
  return out;
}

}  // namespace

std::string dense_cache_path(const std::string& model_dir, WeightScheme s) {
  return model_dir + "/dense-" + scheme_text(s) + ".bin";
}

std::vector<std::pair<std::string, WeightMatrix*>> quantizable_dense_matrices(DenseWeights& w) {
  std::vector<std::pair<std::string, WeightMatrix*>> out;
  for (const model::DenseDataset& ds : model::dense_datasets(w.config)) {
    if (!ds.quantizable) continue;
    WeightMatrix* m = dense_matrix(w, ds);
    if (m && m->rows > 0 && m->cols % 32 == 0) out.emplace_back(ds.path, m);
  }
  return out;
}

std::map<std::string, DenseCacheEntry> read_dense_cache(const std::string& path, WeightScheme s,
                                                        const std::shared_ptr<HugePagePool>& memory) {
  std::map<std::string, DenseCacheEntry> out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return out;
  try {
    const PositionalFile file(path, false);
    const auto size = static_cast<uint64_t>(st.st_size);
    char head[16];
    if (size < sizeof head) fail(ErrorKind::BadInput, "shorter than its header");
    file.read(0, sizeof head, head);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, head + 8, 8);
    if (std::memcmp(head, kMagic, 8) != 0 || header_bytes > kMaxHeader || header_bytes > size - sizeof head)
      fail(ErrorKind::BadInput, "not a dense cache (its first 16 bytes)");
    std::string text(header_bytes, '\0');
    file.read(sizeof head, header_bytes, text.data());
    const nlohmann::json h = parse_json(text, path);
    if (h.at("version").get<int>() != 1 || h.at("scheme").get<std::string>() != scheme_text(s))
      fail(ErrorKind::BadInput, "version or scheme is not this run's");
    for (const nlohmann::json& e : h.at("matrices")) out.emplace(e.at("path").get<std::string>(), read_entry(file, size, s, e, memory));
  } catch (const std::exception& e) {
    log::warn(path, ": not used (", e.what(), "); the dense matrices are quantized at load");
    out.clear();
  }
  return out;
}

bool write_dense_cache(const std::string& path, WeightScheme s, DenseWeights& w, const std::map<std::string, uint64_t>& sources) {
  nlohmann::json entries = nlohmann::json::array();
  std::vector<const WeightMatrix*> order;
  uint64_t offset = 0;  // from the first data byte; shifted once the header's size is known
  for (auto& [name, m] : quantizable_dense_matrices(w)) {
    const auto src = sources.find(name);
    if (m->scheme != s || src == sources.end()) continue;
    entries.push_back({{"path", name},
                       {"rows", m->rows},
                       {"cols", m->cols},
                       {"offset", offset},
                       {"bytes", m->data.size()},
                       {"xxh64", Xxh64().bytes(m->data.data(), m->data.size()).digest()},
                       {"source_xxh64", src->second}});
    order.push_back(m);
    offset = align_up(offset + m->data.size());
  }
  if (order.empty()) return false;
  // The data starts at the first aligned offset after the header, whose size depends on the
  // offsets' digits: grow the estimate until it fits.
  uint64_t data_start = kAlign;
  std::string header;
  for (;;) {
    nlohmann::json shifted = entries;
    for (auto& e : shifted) e["offset"] = e["offset"].get<uint64_t>() + data_start;
    header = nlohmann::json{{"version", 1}, {"scheme", scheme_text(s)}, {"matrices", shifted}}.dump();
    if (16 + header.size() <= data_start) break;
    data_start = align_up(16 + header.size());
  }
  try {
    AtomicFile out(path);
    std::string head(kMagic, 8);
    const uint64_t n = header.size();
    head.append(reinterpret_cast<const char*>(&n), 8);
    head += header;
    head.resize(data_start, '\0');
    out.write(head);
    for (const WeightMatrix* m : order) {
      std::string bytes(m->data.as<char>(), m->data.size());
      bytes.resize(align_up(bytes.size()), '\0');
      out.write(bytes);
    }
    out.commit();
  } catch (const Error& e) {
    log::warn("the quantized dense matrices are not kept (", e.what(), "): the next start quantizes them again");
    return false;
  }
  return true;
}

}  // namespace moerun::io
