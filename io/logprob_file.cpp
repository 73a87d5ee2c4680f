// moe-logprobs files: written by row through HDF5's chunked datasets, read back by position.
#include "io/logprob_file.hpp"

#include <cmath>
#include <filesystem>
#include <optional>

#include "base/error.hpp"
#include "base/xxh64.hpp"
#include "io/hdf5.hpp"
#include "io/output_file.hpp"

namespace moerun::io {
namespace {

constexpr int64_t kFormatVersion = 1;
// Rows buffered before a write: one HDF5 call per 16 rows, at most 16 x vocab floats held.
constexpr int64_t kBufferRows = 16;

std::string part_path(const std::string& path, int64_t part) {
  return part == 0 ? path : path + "." + std::to_string(part);
}

}  // namespace

uint64_t tokens_fingerprint(const std::vector<int32_t>& tokens) {
  return Xxh64().vec(tokens).digest();
}

struct LogprobWriter::Impl {
  std::string path;
  LogprobHeader header;
  AtomicFile file;
  H5Handle h5;
  std::optional<H5RowAppender> rows;
  std::vector<int64_t> positions;
  std::vector<float> pending;

  Impl(const std::string& p, const LogprobHeader& h) : path(p), header(h), file(p) {}

  void flush() {
    if (pending.empty()) return;
    h5_writing(path, [&] { rows->append(pending.data(), static_cast<int64_t>(pending.size()) / header.vocab_size, H5T_NATIVE_FLOAT); });
    pending.clear();
  }
};

LogprobWriter::LogprobWriter(const std::string& path, const LogprobHeader& header, const std::vector<int32_t>& tokens)
    : impl_(std::make_unique<Impl>(path, header)) {
  Impl& m = *impl_;
  m.h5 = h5_open_file(m.file.temp_path(), H5Mode::Create);
  h5_writing(path, [&] {
    h5_write(m.h5, "/tokens", {static_cast<int64_t>(tokens.size())}, H5T_STD_I32LE, H5T_NATIVE_INT32, tokens.data(), false);
    m.rows.emplace(m.h5, "/logprobs", header.vocab_size, 1, H5T_IEEE_F32LE);
  });
}

LogprobWriter::~LogprobWriter() = default;  // an unfinished file's temp is removed by AtomicFile

void LogprobWriter::append(int64_t position, const float* logprobs) {
  Impl& m = *impl_;
  m.positions.push_back(position);
  m.pending.insert(m.pending.end(), logprobs, logprobs + m.header.vocab_size);
  if (static_cast<int64_t>(m.pending.size()) >= kBufferRows * m.header.vocab_size) m.flush();
}

void LogprobWriter::finish() {
  Impl& m = *impl_;
  m.flush();
  const LogprobHeader& h = m.header;
  h5_writing(m.path, [&] {
    h5_write(m.h5, "/positions", {static_cast<int64_t>(m.positions.size())}, H5T_STD_I64LE, H5T_NATIVE_INT64, m.positions.data(), false);
    h5_set_attr(m.h5, "format", std::string("moe-logprobs"));
    h5_set_attr(m.h5, "format_version", kFormatVersion);
    h5_set_attr(m.h5, "vocab_size", h.vocab_size);
    h5_set_attr(m.h5, "context", h.context);
    h5_set_attr(m.h5, "stride", h.stride);
    h5_set_attr(m.h5, "num_tokens", h.num_tokens);
    h5_set_attr_uint64(m.h5, "tokens_xxh64", h.tokens_xxh64);
    h5_set_attr_uint64(m.h5, "run_id", h.run_id);
    h5_set_attr(m.h5, "part", h.part);
    h5_set_attr(m.h5, "parts", h.parts);
    h5_set_attr(m.h5, "rows", static_cast<int64_t>(m.positions.size()));
    h5_set_attr(m.h5, "model", h.model);
  });
  m.rows.reset();
  h5_close_written(m.h5, m.path);
  m.file.commit();
}

struct LogprobBase::Part {
  std::string path;
  H5Handle h5;
};

namespace {

LogprobHeader read_header(hid_t f, const std::string& path) {
  auto need = [&](const char* name) {
    const auto v = h5_attr_int(f, name);
    if (!v)
      fail(ErrorKind::BadInput, path, ": attribute ", name, " is missing (not a moe-logprobs file from moerun perplexity --save-logits?)");
    return *v;
  };
  const auto format = h5_attr_string(f, "format");
  if (!format || *format != "moe-logprobs")
    fail(ErrorKind::BadInput, path, ": attribute format is ", format ? "\"" + *format + "\"" : "missing",
         ", not \"moe-logprobs\" (a file from moerun perplexity --save-logits)");
  if (need("format_version") != kFormatVersion)
    fail(ErrorKind::BadInput, path, ": format_version ", need("format_version"), " is not supported (this moerun reads ", kFormatVersion,
         ")");
  LogprobHeader h;
  h.vocab_size = need("vocab_size");
  h.context = need("context");
  h.stride = need("stride");
  h.num_tokens = need("num_tokens");
  h.part = need("part");
  h.parts = need("parts");
  const auto fp = h5_attr_uint64(f, "tokens_xxh64"), id = h5_attr_uint64(f, "run_id");
  if (!fp || !id) fail(ErrorKind::BadInput, path, ": attribute tokens_xxh64 or run_id is missing");
  h.tokens_xxh64 = *fp;
  h.run_id = *id;
  h.model = h5_attr_string(f, "model").value_or("");
  if (h.vocab_size < 1 || h.vocab_size > (int64_t{1} << 24) || h.num_tokens < 0 || h.parts < 1 || h.parts > 65536)
    fail(ErrorKind::BadInput, path, ": vocab_size, num_tokens or parts out of range");
  return h;
}

}  // namespace

LogprobBase::LogprobBase(const std::string& path) : path_(path) {
  for (int64_t p = 0; p < header_.parts || p == 0; ++p) {
    auto part = std::make_unique<Part>();
    part->path = part_path(path, p);
    if (p > 0 && !std::filesystem::exists(part->path))
      fail(ErrorKind::Io, path, " is part 0 of ", header_.parts, " (one per router), but ", part->path, " is missing");
    part->h5 = h5_open_file(part->path, H5Mode::ReadOnly);
    h5_reading(part->path, [&] {
      const LogprobHeader h = read_header(part->h5, part->path);
      if (p == 0) {
        header_ = h;
        const H5DatasetInfo t = h5_dataset_info(part->h5, "/tokens");
        if (t.shape.size() != 1 || t.shape[0] != h.num_tokens) fail(ErrorKind::BadInput, "/tokens has the wrong shape");
        tokens_.resize(static_cast<std::size_t>(h.num_tokens));
        h5_read(part->h5, "/tokens", H5T_NATIVE_INT32, tokens_.data());
        if (tokens_fingerprint(tokens_) != h.tokens_xxh64) fail(ErrorKind::BadInput, "/tokens does not match attribute tokens_xxh64");
      } else if (h.run_id != header_.run_id || h.part != p) {
        fail(ErrorKind::BadInput, "attribute run_id or part: not part ", p, " of the run that wrote ", path, " (a stale file?)");
      }
      const H5DatasetInfo pos = h5_dataset_info(part->h5, "/positions");
      const H5DatasetInfo lp = h5_dataset_info(part->h5, "/logprobs");
      if (pos.shape.size() != 1 || lp.shape.size() != 2 || lp.shape[0] != pos.shape[0] || lp.shape[1] != header_.vocab_size)
        fail(ErrorKind::BadInput, "/positions and /logprobs disagree (want [rows] and [rows, ", header_.vocab_size, "])");
      std::vector<int64_t> positions(static_cast<std::size_t>(pos.shape[0]));
      h5_read(part->h5, "/positions", H5T_NATIVE_INT64, positions.data());
      for (std::size_t r = 0; r < positions.size(); ++r) {
        if (positions[r] < 1 || positions[r] >= header_.num_tokens) fail(ErrorKind::BadInput, "/positions[", r, "] is out of range");
        if (!where_.emplace(positions[r], std::make_pair(static_cast<int>(p), static_cast<int64_t>(r))).second)
          fail(ErrorKind::BadInput, "/positions[", r, "] = ", positions[r], " is saved twice");
      }
    });
    parts_.push_back(std::move(part));
  }
}

LogprobBase::~LogprobBase() = default;

void LogprobBase::read(int64_t position, float* out) const {
  const auto it = where_.find(position);
  if (it == where_.end()) fail(ErrorKind::BadInput, path_, ": no saved log-probs predict token ", position);
  const Part& part = *parts_[static_cast<std::size_t>(it->second.first)];
  h5_reading(part.path, [&] { h5_read_rows(part.h5, "/logprobs", it->second.second, 1, H5T_NATIVE_FLOAT, out); });
  // A saved log-prob is finite (log_softmax of finite logits): a NaN or Inf would turn the
  // divergence into NaN without a word. Named as the weights' scan names them.
  for (int64_t v = 0; v < header_.vocab_size; ++v)
    if (!std::isfinite(out[v]))
      fail(ErrorKind::BadInput, part.path, ": /logprobs[", it->second.second, ",", v, "] is ", std::isnan(out[v]) ? "NaN" : "Inf",
           " (saved log-probs are finite)");
}

}  // namespace moerun::io
