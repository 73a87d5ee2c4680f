// RAII handles and the check macro for the HDF5 C API. Nothing outside this file and hdf5.cpp
// calls H5* functions directly; failures throw moerun::Error with the call, the location and
// HDF5's own message from its error stack.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace moerun::io {

// The serial HDF5 library is not thread-safe: threads that read HDF5 (the cache's I/O threads)
// hold this around their calls.
std::mutex& hdf5_mutex();

[[noreturn]] void h5_fail(const char* call, const char* file, int line);

template <typename T>
T h5_check(T value, const char* call, const char* file, int line) {
  if (value < 0) h5_fail(call, file, line);
  return value;
}

#define H5_CHECK(expr) ::moerun::io::h5_check((expr), #expr, __FILE__, __LINE__)

// One owned hid_t with the close function of its kind.
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  ~H5Handle() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }  // the caller closes it
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Runs `read` on the open file named `fname`. A failure gets the file's name in front (once), and a
// failed HDF5 call counts as bad input: the file opened, so its metadata did not parse.
[[noreturn]] void h5_rethrow_in_file(const Error& e, const std::string& fname);
template <typename F>
auto h5_reading(const std::string& fname, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    h5_rethrow_in_file(e, fname);
  }
}

// Runs `write` on a file being written (`fname`: its final name, for messages): a failed HDF5
// call (a full disk, a quota) becomes an Io error naming the file.
[[noreturn]] void h5_rethrow_writing(const Error& e, const std::string& fname);
template <typename F>
auto h5_writing(const std::string& fname, F&& write) -> decltype(write()) {
  try {
    return write();
  } catch (const Error& e) {
    h5_rethrow_writing(e, fname);
  }
}
// Closes a file opened for writing, which flushes it: a failed flush is an Io error naming `fname`,
// so that no caller renames a file that was never completely written into place.
void h5_close_written(H5Handle& file, const std::string& fname);

// Before any other HDF5 call (main): libhdf5 must not run its own clean-up at exit. After a failed
// write (a full disk) its atexit handler closes the half-written file again and crashes
// (H5F__close_cb in H5_term_library); every file is closed by its handle instead.
void h5_init();
// Silence HDF5's automatic error printing (we report errors ourselves); idempotent.
void h5_quiet();

enum class H5Mode { ReadOnly, ReadWrite, Create };

// Opens an HDF5 file. A missing file is ErrorKind::Io; a file that exists but is not valid HDF5
// (truncated, wrong format) is ErrorKind::BadInput. Messages start with `path`.
H5Handle h5_open_file(const std::string& path, H5Mode mode);

// A virtual file driver's callback (called from C) cannot throw: it keeps its error here, and the
// HDF5 call that failed because of it rethrows that error (H5_CHECK, and the openers below)
// instead of HDF5's generic message. One pending error per thread.
void h5_keep_driver_error(std::exception_ptr e);
void h5_rethrow_driver_error();  // if one is pending (and clears it)
std::string h5_error_message();  // HDF5's error stack, innermost cause first (and clears it)

// Element class of a dataset or attribute, as far as the format cares.
struct H5TypeInfo {
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  bool is_signed = false;
  std::string describe() const;  // "float32", "uint16", "int64", "string", ...
};

struct H5DatasetInfo {
  std::vector<int64_t> shape;
  H5TypeInfo type;
  std::vector<int64_t> chunk;  // empty when not chunked
};

// Does a link exist at `path` (checks every component, so a missing parent is not an error)?
bool h5_exists(hid_t loc, const std::string& path);
std::vector<std::string> h5_children(hid_t loc, const std::string& group_path);
// True when the object at `path` is a group (false for a dataset).
bool h5_is_group(hid_t loc, const std::string& path);
H5DatasetInfo h5_dataset_info(hid_t loc, const std::string& path);
// Reads a whole dataset, converting to `mem_type` (e.g. H5T_NATIVE_FLOAT, H5T_NATIVE_UINT16).
void h5_read(hid_t loc, const std::string& path, hid_t mem_type, void* out);
// Writes a dataset of `shape`, creating parent groups; chunked as one chunk when `one_chunk`.
void h5_write(hid_t loc, const std::string& path, const std::vector<int64_t>& shape, hid_t file_type, hid_t mem_type, const void* data,
              bool one_chunk);
H5Handle h5_create_group(hid_t loc, const std::string& path);

// A 2-D dataset [rows, cols] that grows by rows (chunks of `chunk_rows` rows), for outputs larger
// than memory: created empty, then appended to. Rows are read back in ranges.
class H5RowAppender {
 public:
  H5RowAppender(hid_t loc, const std::string& path, int64_t cols, int64_t chunk_rows, hid_t file_type);
  void append(const void* rows, int64_t count, hid_t mem_type);  // rows [count, cols]
  int64_t rows() const { return rows_; }

 private:
  H5Handle d_;
  int64_t cols_ = 0, rows_ = 0;
};
// Rows [row0, row0 + count) of a 2-D dataset into out [count, cols] (mem_type elements).
void h5_read_rows(hid_t loc, const std::string& path, int64_t row0, int64_t count, hid_t mem_type, void* out);

// Where the single chunk of a one-chunk dataset lies in the file (address and stored size, and
// the filters skipped for it); nullopt when the dataset is not stored as exactly one chunk.
struct H5ChunkExtent {
  uint64_t address = 0, size = 0;
  unsigned filter_mask = 0;
};
std::optional<H5ChunkExtent> h5_single_chunk(hid_t loc, const std::string& path);
// Whether a numeric dataset is stored little-endian (the byte order of every moe-hdf5 writer).
bool h5_little_endian(hid_t loc, const std::string& path);
// Where a contiguous dataset's bytes lie in the file; nullopt for other layouts or no storage yet.
std::optional<uint64_t> h5_contiguous_offset(hid_t loc, const std::string& path);
// Filters in the dataset's pipeline (compression); 0 when its chunks are stored as raw bytes.
int h5_filter_count(hid_t loc, const std::string& path);

// Attributes. Readers accept any integer / float type and variable- or fixed-length strings;
// they return nullopt when the attribute is missing and throw when its type does not fit.
std::optional<int64_t> h5_attr_int(hid_t obj, const std::string& name);
std::optional<uint64_t> h5_attr_uint64(hid_t obj, const std::string& name);
std::optional<double> h5_attr_double(hid_t obj, const std::string& name);
std::optional<std::string> h5_attr_string(hid_t obj, const std::string& name);
void h5_set_attr(hid_t obj, const std::string& name, int64_t value);
void h5_set_attr_uint64(hid_t obj, const std::string& name, uint64_t value);
void h5_set_attr(hid_t obj, const std::string& name, double value);
void h5_set_attr(hid_t obj, const std::string& name, const std::string& value);

H5Handle h5_open_object(hid_t loc, const std::string& path);

// Reads the whole metadata of a file: every object reachable from the root, every attribute (by
// index and by name, values included), every dataset's dataspace, type, layout and chunk index.
// BadInput naming the file and object on an error. Run by the HDF5 probe in a child process
// (io/hdf5_probe.hpp), where a crash inside libhdf5 cannot take the command down with it.
void h5_walk_metadata(hid_t file, const std::string& name);
// Removes the link at `path` (dataset, group or attribute holder); used by tools and tests.
void h5_delete(hid_t loc, const std::string& path);
void h5_delete_attr(hid_t obj, const std::string& name);

}  // namespace moerun::io
