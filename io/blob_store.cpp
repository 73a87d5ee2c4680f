// L2 blob store: one blob file of page-aligned parts + an atomically rewritten JSON index.
#include "io/blob_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/xxh64.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "io/positional_file.hpp"
#include "io/private_dir.hpp"

namespace moerun::io {
namespace {

constexpr uint64_t kPage = kDirectIoAlign;
constexpr int kIndexVersion = 2;  // 1: one raw part per expert, no layout

uint64_t round_up(uint64_t n) {
  return (n + kPage - 1) / kPage * kPage;
}

}  // namespace

uint64_t BlobEntry::span() const {
  uint64_t s = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) s = (i + 1 < parts.size() ? s + round_up(parts[i]) : s + parts[i]);
  return s;
}

BlobStore::BlobStore(const std::string& dir, int64_t max_bytes, const std::string& layout, bool direct)
    : dir_(dir), blob_path_(dir + "/experts.blob"), index_path_(dir + "/index.json"), layout_(layout), max_bytes_(max_bytes) {
  make_private_directory(dir, "L2 directory");
  fd_ = open_owned_file(blob_path_, O_RDWR | O_CREAT, "the L2 blob");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    read_only_ = err == EWOULDBLOCK;
    if (read_only_)
      log::info(dir_, ": L2 in use by another run; this run reads its entries and adds none");
    else  // a file system without locks: as before, one writer is the user's to ensure
      log::warn(blob_path_, ": cannot lock (", std::strerror(err), "); runs sharing this L2 directory may overwrite each other");
  }
  if (direct) direct_fd_ = ::open(blob_path_.c_str(), O_RDONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);  // tmpfs and some others refuse
  direct_ = direct_fd_ >= 0;
  const off_t file_size = ::lseek(fd_, 0, SEEK_END);
  // No index yet; or a link or another kind of file at its name, never read (the first write replaces it).
  struct stat sb {};
  if (::lstat(index_path_.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) return;
  int64_t dropped = 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_regular_file(index_path_));
    if (j.value("format_version", 0) != kIndexVersion || j.value("layout", std::string()) != layout_) {
      log::info(index_path_, ": L2 holds another layout (", j.value("layout", std::string("format 1")),
                read_only_ ? "); another run holds it, so this run uses no L2 entry" : "); starting it empty");
      if (read_only_) return;
      if (::ftruncate(fd_, 0) != 0) { /* the empty index does not cover the old bytes either way */
      }
      write_index_locked();
      return;
    }
    for (const auto& e : j.at("entries")) {
      BlobEntry b;
      b.offset = e.at("offset").get<uint64_t>();
      b.parts = e.at("parts").get<std::vector<uint64_t>>();
      b.xxh64 = e.at("xxh64").get<uint64_t>();
      b.source_xxh64 = e.at("source_xxh64").get<uint64_t>();
      if (b.offset % kPage != 0 || b.parts.empty() || b.offset + b.span() > static_cast<uint64_t>(file_size)) {
        ++dropped;
        continue;
      }
      end_ = std::max(end_, round_up(b.offset + b.span()));
      index_[{e.at("layer").get<int64_t>(), e.at("expert").get<int64_t>()}] = std::move(b);
    }
  } catch (const std::exception& e) {
    log::warn(index_path_, ": unreadable L2 index (", e.what(), "); starting the L2 cache empty");
    index_.clear();
    end_ = 0;
  }
  if (dropped) log::warn(index_path_, ": dropped ", dropped, " L2 entries past the end of ", blob_path_);
  corrupt_ += dropped;
}

BlobStore::~BlobStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    settle_written_locked();
  }
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

bool BlobStore::drop_locked(int64_t layer, int64_t expert, const char* why) {
  index_.erase({layer, expert});
  ++corrupt_;
  log::warn(blob_path_, ": L2 entry for /layers/", layer, "/experts/", expert, " is ", why, "; dropped, refetching");
  write_index_locked();
  return false;
}

void BlobStore::forget(int64_t layer, int64_t expert) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.erase({layer, expert})) write_index_locked();
}

bool BlobStore::read(int64_t layer, int64_t expert, uint64_t source_xxh64, const std::vector<BlobPart>& into) {
  BlobEntry b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find({layer, expert});
    if (it == index_.end()) return false;
    b = it->second;
  }
  if (b.source_xxh64 != source_xxh64 || b.parts.size() != into.size()) {
    std::lock_guard<std::mutex> lock(mu_);
    return drop_locked(layer, expert, "from another model");
  }
  bool sizes_match = true;
  for (std::size_t i = 0; i < into.size(); ++i) sizes_match = sizes_match && into[i].size == b.parts[i];
  // One preadv for the whole entry when every buffer can take its part's page padding: the parts
  // lie back to back on pages, so one request (one disk round trip with O_DIRECT) fills them all.
  bool vectored = sizes_match;
  bool aligned = direct_;
  uint64_t total = 0;
  std::vector<iovec> iov;
  for (const BlobPart& p : into) {
    vectored = vectored && p.capacity >= round_up(p.size);
    aligned = aligned && reinterpret_cast<uintptr_t>(p.data) % kPage == 0;
    iov.push_back({p.data, round_up(p.size)});
    total += round_up(p.size);
  }
  if (vectored) {
    ssize_t got;
    do {
      got = ::preadv(aligned ? direct_fd_ : fd_, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(b.offset));
    } while (got < 0 && errno == EINTR);
    // The last part's padding may lie past the end of the file (buffered reads only).
    vectored = got >= 0 && static_cast<uint64_t>(got) >= total - (round_up(b.parts.back()) - b.parts.back());
  }
  Xxh64 sum;
  bool complete = sizes_match;
  if (vectored) {
    for (const BlobPart& p : into) sum.bytes(p.data, p.size);
  }
  uint64_t off = b.offset;
  for (std::size_t i = 0; i < into.size() && complete && !vectored; ++i) {
    const BlobPart& p = into[i];
    if (p.size != b.parts[i]) {
      complete = false;
      break;
    }
    // O_DIRECT needs page-aligned offset, length and memory: parts start on pages, and the length
    // is rounded up when the buffer has room; otherwise this part goes through the page cache.
    const bool direct = direct_ && p.capacity >= round_up(p.size) && reinterpret_cast<uintptr_t>(p.data) % kPage == 0;
    const uint64_t want = direct ? round_up(p.size) : p.size;
    complete = pread_full(direct ? direct_fd_ : fd_, p.data, want, off) >= p.size;
    if (complete) sum.bytes(p.data, p.size);
    off += round_up(p.size);
  }
  const bool intact = complete && sum.digest() == b.xxh64;
  if (!intact) {
    std::lock_guard<std::mutex> lock(mu_);
    return drop_locked(layer, expert, "corrupt");
  }
  return true;
}

bool BlobStore::put(int64_t layer, int64_t expert, const std::vector<ConstBlobPart>& parts, uint64_t source_xxh64) {
  BlobEntry b;
  b.source_xxh64 = source_xxh64;
  Xxh64 sum;
  for (const ConstBlobPart& p : parts) {
    b.parts.push_back(p.size);
    sum.bytes(p.data, p.size);
  }
  b.xxh64 = sum.digest();

  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count({layer, expert})) return true;
  if (read_only_) return false;
  b.offset = end_;
  const auto fail_once = [&](const std::string& why) {
    if (!full_warned_) log::warn(dir_, ": L2 cache not growing (", why, "); experts beyond it come from L3");
    full_warned_ = true;
    return false;
  };
  if (static_cast<int64_t>(b.offset + b.span()) > max_bytes_) return fail_once("--l2-bytes reached");
  uint64_t off = b.offset;
  for (const ConstBlobPart& p : parts) {
    uint64_t done = 0;
    while (done < p.size) {
      const ssize_t n = ::pwrite(fd_, static_cast<const char*>(p.data) + done, p.size - done, static_cast<off_t>(off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        if (::ftruncate(fd_, static_cast<off_t>(b.offset)) != 0) { /* the index does not cover it either way */
        }
        return fail_once(std::strerror(err));
      }
      done += static_cast<uint64_t>(n);
    }
    off += round_up(p.size);
  }
  settle_written_locked();
  written_offset_ = b.offset;
  written_bytes_ = round_up(b.span());
  ::sync_file_range(fd_, static_cast<off_t>(written_offset_), static_cast<off_t>(written_bytes_), SYNC_FILE_RANGE_WRITE);
  end_ = round_up(b.offset + b.span());
  index_[{layer, expert}] = std::move(b);
  write_index_locked();
  return true;
}

void BlobStore::settle_written_locked() {
  if (written_bytes_ == 0 || fd_ < 0) return;
  // Best effort: a filesystem without these (or an error) leaves the pages to the kernel.
  ::sync_file_range(fd_, static_cast<off_t>(written_offset_), static_cast<off_t>(written_bytes_),
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  ::posix_fadvise(fd_, static_cast<off_t>(written_offset_), static_cast<off_t>(written_bytes_), POSIX_FADV_DONTNEED);
  written_bytes_ = 0;
}

void BlobStore::write_index_locked() {
  if (read_only_) return;  // the run that holds the directory owns its index
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [k, b] : index_)
    entries.push_back({{"layer", k.first},
                       {"expert", k.second},
                       {"offset", b.offset},
                       {"parts", b.parts},
                       {"xxh64", b.xxh64},
                       {"source_xxh64", b.source_xxh64}});
  nlohmann::json j{{"format", "moerun-l2-index"}, {"format_version", kIndexVersion}, {"layout", layout_}, {"entries", entries}};
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
