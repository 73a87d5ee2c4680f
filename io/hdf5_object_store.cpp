// The object-store virtual file driver (HDF5 1.10 H5FD_class_t). HDF5 calls the callbacks from C,
// so they never throw: a failure is kept (h5_keep_driver_error) and rethrown by the HDF5 call that
// failed, with its own kind and text.
#include "io/hdf5_object_store.hpp"

#include <H5FDpublic.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace moerun::io {
namespace {

constexpr uint64_t kPage = 64 << 10;  // metadata reads round to pages
constexpr std::size_t kDirect = 4 * kPage;  // larger reads (tensor data) bypass the cache
constexpr std::size_t kCacheBytes = 64 << 20;  // per open file; cleared when full

struct DriverInfo {  // the file access property: which client to read through
  const ObjectStore* store;
};

struct RemoteFile {
  const ObjectStore* store = nullptr;
  S3Url url;
  std::string name;
  uint64_t size = 0;
  haddr_t eoa = 0;
  std::map<uint64_t, std::vector<char>> pages;  // page index -> bytes (the last one may be short)
  std::size_t cached = 0;

  // [offset, offset + n) within the object, n > 0.
  void read(uint64_t offset, std::size_t n, char* dst) {
    if (n >= kDirect) {
      store->read(url, offset, n, dst);
      return;
    }
    const uint64_t first = offset / kPage, last = (offset + n - 1) / kPage;
    // The pages missing from the cache, fetched with one GET over their span.
    uint64_t lo = last + 1, hi = first;
    for (uint64_t p = first; p <= last; ++p)
      if (!pages.count(p)) {
        lo = std::min(lo, p);
        hi = std::max(hi, p);
      }
    if (lo <= hi) {
      if (cached > kCacheBytes) {
        pages.clear();
        cached = 0;
        lo = first;
        hi = last;
      }
      const uint64_t begin = lo * kPage, end = std::min(size, (hi + 1) * kPage);
      std::vector<char> span(static_cast<std::size_t>(end - begin));
      store->read(url, begin, span.size(), span.data());
      for (uint64_t p = lo; p <= hi; ++p) {
        const uint64_t pb = p * kPage - begin, pe = std::min<uint64_t>(span.size(), pb + kPage);
        pages[p].assign(span.begin() + static_cast<std::ptrdiff_t>(pb), span.begin() + static_cast<std::ptrdiff_t>(pe));
        cached += static_cast<std::size_t>(pe - pb);
      }
    }
    for (uint64_t p = first; p <= last; ++p) {
      const std::vector<char>& page = pages.at(p);
      const uint64_t from = std::max(offset, p * kPage), to = std::min(offset + n, p * kPage + page.size());
      std::memcpy(dst + (from - offset), page.data() + (from - p * kPage), static_cast<std::size_t>(to - from));
    }
  }
};

// What HDF5 holds: its public part first, then ours.
struct DriverFile {
  H5FD_t pub;
  RemoteFile* remote;
};

RemoteFile& remote_of(const H5FD_t* f) {
  return *reinterpret_cast<const DriverFile*>(f)->remote;
}

herr_t fail_in_driver(const char* what) {
  H5Epush2(H5E_DEFAULT, __FILE__, what, __LINE__, H5E_ERR_CLS, H5E_VFL, H5E_READERROR, "object store read failed");
  return -1;
}

H5FD_t* driver_open(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  (void)maxaddr;
  if (flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC)) return nullptr;  // read-only
  const auto* info = static_cast<const DriverInfo*>(H5Pget_driver_info(fapl));
  if (!info || !info->store) return nullptr;
  try {
    auto remote = std::make_unique<RemoteFile>();
    remote->store = info->store;
    remote->name = name;
    remote->url = parse_s3_url(name);
    remote->size = info->store->size_of(remote->url);
    auto* f = new DriverFile{};
    f->remote = remote.release();
    return &f->pub;
  } catch (...) {
    h5_keep_driver_error(std::current_exception());
    fail_in_driver("open");
    return nullptr;
  }
}

herr_t driver_close(H5FD_t* f) {
  auto* df = reinterpret_cast<DriverFile*>(f);
  delete df->remote;
  delete df;
  return 0;
}

int driver_cmp(const H5FD_t* a, const H5FD_t* b) {
  const std::string &x = remote_of(a).name, &y = remote_of(b).name;
  return x < y ? -1 : (x > y ? 1 : 0);
}

herr_t driver_query(const H5FD_t*, unsigned long* flags) {
  if (flags) *flags = H5FD_FEAT_DATA_SIEVE;
  return 0;
}

haddr_t driver_get_eoa(const H5FD_t* f, H5FD_mem_t) {
  return remote_of(f).eoa;
}
herr_t driver_set_eoa(H5FD_t* f, H5FD_mem_t, haddr_t addr) {
  remote_of(f).eoa = addr;
  return 0;
}
haddr_t driver_get_eof(const H5FD_t* f, H5FD_mem_t) {
  return remote_of(f).size;
}

herr_t driver_get_handle(H5FD_t* f, hid_t, void** handle) {
  if (!handle) return -1;
  *handle = &remote_of(f);
  return 0;
}

herr_t driver_read(H5FD_t* f, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  RemoteFile& r = remote_of(f);
  try {
    // Beyond the end of the object reads as zeros, as with the POSIX drivers.
    const uint64_t have = addr < r.size ? std::min<uint64_t>(size, r.size - addr) : 0;
    if (have > 0) r.read(addr, static_cast<std::size_t>(have), static_cast<char*>(buf));
    if (have < size) std::memset(static_cast<char*>(buf) + have, 0, size - static_cast<std::size_t>(have));
    return 0;
  } catch (...) {
    h5_keep_driver_error(std::current_exception());
    return fail_in_driver("read");
  }
}

herr_t driver_write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) {
  return -1;
}

const H5FD_class_t kDriverClass = {"moerun-object-store",
                                   static_cast<haddr_t>(INT64_MAX),
                                   H5F_CLOSE_WEAK,
                                   nullptr,  // terminate
                                   nullptr,
                                   nullptr,
                                   nullptr,  // superblock
                                   sizeof(DriverInfo),
                                   nullptr,
                                   nullptr,
                                   nullptr,  // fapl (copied byte for byte)
                                   0,
                                   nullptr,
                                   nullptr,  // dxpl
                                   driver_open,
                                   driver_close,
                                   driver_cmp,
                                   driver_query,
                                   nullptr,  // get_type_map
                                   nullptr,
                                   nullptr,  // alloc, free
                                   driver_get_eoa,
                                   driver_set_eoa,
                                   driver_get_eof,
                                   driver_get_handle,
                                   driver_read,
                                   driver_write,
                                   nullptr,
                                   nullptr,  // flush, truncate
                                   nullptr,
                                   nullptr,  // lock, unlock
                                   H5FD_FLMAP_DICHOTOMY};

hid_t driver_id() {
  static std::once_flag once;
  static hid_t id = H5I_INVALID_HID;
  std::call_once(once, [] { id = H5FDregister(&kDriverClass); });
  if (id < 0) fail(ErrorKind::Internal, "cannot register the object-store HDF5 driver");
  return id;
}

}  // namespace

H5Handle h5_open_object_store_file(const ObjectStore& store, const S3Url& url) {
  h5_quiet();
  H5Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  const DriverInfo info{&store};
  H5_CHECK(H5Pset_driver(fapl, driver_id(), &info));
  const std::string name = url.str();
  const hid_t f = H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl);
  if (f < 0) {
    h5_rethrow_driver_error();  // the store's own error (Io naming the URL), if it failed
    fail(ErrorKind::BadInput, name, ": not a readable HDF5 file (truncated or corrupt?): ", h5_error_message());
  }
  return H5Handle(f, H5Fclose);
}

}  // namespace moerun::io
