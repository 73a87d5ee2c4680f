// L2 blob store: packed blob file + atomically rewritten JSON index.
#include "io/blob_store.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"
#include "base/log.hpp"
#include "io/result_journal.hpp"

namespace moerun::io {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t round_up(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

}  // namespace

BlobStore::BlobStore(const std::string& dir, int64_t max_bytes, bool direct)
    : dir_(dir), blob_path_(dir + "/experts.blob"), index_path_(dir + "/index.json"), max_bytes_(max_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorKind::Io, dir, ": cannot create the L2 directory: ", ec.message());
  fd_ = ::open(blob_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(ErrorKind::Io, blob_path_, ": cannot open: ", std::strerror(errno));
  if (direct) direct_fd_ = ::open(blob_path_.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);  // tmpfs and some others refuse
  direct_ = direct_fd_ >= 0;
  const off_t file_size = ::lseek(fd_, 0, SEEK_END);
  std::ifstream in(index_path_);
  if (in) {
    int64_t dropped = 0;
    try {
      const nlohmann::json j = nlohmann::json::parse(in);
      for (const auto& e : j.at("entries")) {
        BlobEntry b{e.at("offset").get<uint64_t>(), e.at("size").get<uint64_t>(), e.at("xxh64").get<uint64_t>()};
        if (b.offset % kPage != 0 || b.offset + b.size > static_cast<uint64_t>(file_size)) {
          ++dropped;
          continue;
        }
        index_[{e.at("layer").get<int64_t>(), e.at("expert").get<int64_t>()}] = b;
        end_ = std::max(end_, round_up(b.offset + b.size));
      }
    } catch (const std::exception& e) {
      log::warn(index_path_, ": unreadable L2 index (", e.what(), "); starting the L2 cache empty");
      index_.clear();
      end_ = 0;
    }
    if (dropped) log::warn(index_path_, ": dropped ", dropped, " L2 entries past the end of ", blob_path_);
    corrupt_ += dropped;
  }
}

BlobStore::~BlobStore() {
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

bool BlobStore::read(int64_t layer, int64_t expert, uint64_t expected, AlignedBuffer& buf) {
  BlobEntry b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find({layer, expert});
    if (it == index_.end()) return false;
    b = it->second;
  }
  buf.resize(b.size);
  // O_DIRECT needs page-aligned offset, length and memory: entries start on pages, the buffer is
  // page-aligned with page-multiple capacity (AlignedBuffer), and the length is rounded up.
  const bool direct = direct_ && buf.capacity() >= round_up(b.size) &&
                      reinterpret_cast<uintptr_t>(buf.data()) % kPage == 0;
  const int fd = direct ? direct_fd_ : fd_;
  const uint64_t want = direct ? round_up(b.size) : b.size;
  uint64_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, static_cast<char*>(buf.data()) + got, want - got, static_cast<off_t>(b.offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // short file (torn entry) or an I/O error: treated as corrupt below
    got += static_cast<uint64_t>(n);
  }
  const bool intact = got >= b.size && b.xxh64 == expected && XXH64(buf.data(), b.size, 0) == expected;
  if (!intact) {
    std::lock_guard<std::mutex> lock(mu_);
    index_.erase({layer, expert});
    ++corrupt_;
    log::warn(blob_path_, ": L2 entry for /layers/", layer, "/experts/", expert, " is corrupt; dropped, refetching");
    write_index_locked();
    return false;
  }
  return true;
}

bool BlobStore::put(int64_t layer, int64_t expert, const void* data, std::size_t size, uint64_t xxh64) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count({layer, expert})) return true;
  const uint64_t off = end_;
  const auto fail_once = [&](const std::string& why) {
    if (!full_warned_) log::warn(dir_, ": L2 cache not growing (", why, "); experts beyond it come from L3");
    full_warned_ = true;
    return false;
  };
  if (static_cast<int64_t>(off + size) > max_bytes_) return fail_once("--l2-bytes reached");
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd_, static_cast<const char*>(data) + done, size - done, static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      if (::ftruncate(fd_, static_cast<off_t>(off)) != 0) { /* the index does not cover it either way */ }
      return fail_once(std::strerror(err));
    }
    done += static_cast<uint64_t>(n);
  }
  index_[{layer, expert}] = {off, size, xxh64};
  end_ = round_up(off + size);
  write_index_locked();
  return true;
}

void BlobStore::write_index_locked() {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [k, b] : index_)
    entries.push_back({{"layer", k.first}, {"expert", k.second}, {"offset", b.offset}, {"size", b.size}, {"xxh64", b.xxh64}});
  nlohmann::json j{{"format", "moerun-l2-index"}, {"format_version", 1}, {"entries", entries}};
  try {
    write_file_atomically(index_path_, {j.dump()});
  } catch (const Error& e) {
    if (!full_warned_) log::warn(index_path_, ": cannot write the L2 index (", e.what(), ")");
    full_warned_ = true;
  }
}

bool BlobStore::has(int64_t layer, int64_t expert) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count({layer, expert}) > 0;
}

int64_t BlobStore::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(index_.size());
}

int64_t BlobStore::corrupt_dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return corrupt_;
}

}  // namespace moerun::io
