// HDF5 wrapper implementation: handles, error-stack capture, attribute type conversion.
#include "io/hdf5.hpp"

#include "io/input_file.hpp"

#include <algorithm>
#include <cstring>

#include <filesystem>
#include <sstream>
#include <utility>

namespace moerun::io {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace {
thread_local std::exception_ptr pending_driver_error;
}  // namespace

void h5_keep_driver_error(std::exception_ptr e) {
  if (!pending_driver_error) pending_driver_error = std::move(e);  // the first cause counts
}

void h5_rethrow_driver_error() {
  if (!pending_driver_error) return;
  std::exception_ptr e = std::exchange(pending_driver_error, nullptr);
  H5Eclear2(H5E_DEFAULT);
  std::rethrow_exception(e);
}

namespace {

herr_t collect_error(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err->desc) *out = err->desc;  // innermost frame: the real cause
  if (n > 0 && err->desc && out->empty()) *out = err->desc;
  return 0;
}

// Never throws: for callbacks that HDF5 (C) calls, which must not unwind through it.
std::string error_stack_text() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "unknown HDF5 error" : msg;
}

std::string error_stack_message() {
  // A driver's own error (the object store's, say) is the real cause: it is thrown instead.
  h5_rethrow_driver_error();
  return error_stack_text();
}

H5TypeInfo type_info(hid_t type) {
  H5TypeInfo t;
  t.cls = H5Tget_class(type);
  t.size = H5Tget_size(type);
  if (t.cls == H5T_INTEGER) t.is_signed = H5Tget_sign(type) == H5T_SGN_2;
  return t;
}

}  // namespace

std::string h5_error_message() {
  return error_stack_message();
}

void h5_fail(const char* call, const char* file, int line) {
  throw Error(ErrorKind::Io, str("HDF5: ", call, " failed: ", error_stack_message(), " (", file, ":", line, ")"));
}

void h5_rethrow_in_file(const Error& e, const std::string& fname) {
  const std::string msg = e.what();
  if (msg.rfind("HDF5: ", 0) == 0) throw Error(ErrorKind::BadInput, fname + ": corrupt HDF5 metadata: " + msg);
  if (msg.rfind(fname, 0) == 0) throw e;
  throw Error(e.kind(), fname + ": " + msg);
}

void h5_rethrow_writing(const Error& e, const std::string& fname) {
  const std::string msg = e.what();
  if (msg.rfind(fname, 0) == 0) throw e;
  throw Error(msg.rfind("HDF5: ", 0) == 0 ? ErrorKind::Io : e.kind(), fname + ": writing failed (disk full?): " + msg);
}

void h5_close_written(H5Handle& file, const std::string& fname) {
  const hid_t id = file.release();
  if (id >= 0 && H5Fclose(id) < 0)
    fail(ErrorKind::Io, fname, ": writing failed (disk full?): HDF5: H5Fclose failed: ", error_stack_message());
}

void h5_init() {
  H5dont_atexit();
}

void h5_quiet() {
  static bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

std::string H5TypeInfo::describe() const {
  switch (cls) {
    case H5T_FLOAT: return str("float", size * 8);
    case H5T_INTEGER: return str(is_signed ? "int" : "uint", size * 8);
    case H5T_STRING: return "string";
    default: return "unsupported type";
  }
}

H5Handle h5_open_file(const std::string& path, H5Mode mode) {
  h5_quiet();
  if (mode == H5Mode::Create) {
    // No modification times in object headers (here: the root group), so that the same content
    // gives the same bytes (a converted model re-uploaded is recognised by its checksum).
    H5Handle fcpl(H5_CHECK(H5Pcreate(H5P_FILE_CREATE)), H5Pclose);
    H5_CHECK(H5Pset_obj_track_times(fcpl, 0));
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    if (f < 0) fail(ErrorKind::Io, path, ": cannot create HDF5 file: ", error_stack_message());
    return H5Handle(f, H5Fclose);
  }
  // A FIFO or a device would block libhdf5's open or read forever: refused before it sees them.
  if (!check_regular_file(path)) fail(ErrorKind::Io, path, ": no such file");
  hid_t f = H5Fopen(path.c_str(), mode == H5Mode::ReadWrite ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    std::string cause = error_stack_message();
    FILE* probe = std::fopen(path.c_str(), "rb");
    if (!probe) fail(ErrorKind::Io, path, ": cannot open for reading");
    std::fclose(probe);
    fail(ErrorKind::BadInput, path, ": not a readable HDF5 file (truncated or corrupt?): ", cause);
  }
  return H5Handle(f, H5Fclose);
}

bool h5_exists(hid_t loc, const std::string& path) {
  std::string prefix;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    prefix += "/" + part;
    htri_t e = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return true;
}

void h5_delete(hid_t loc, const std::string& path) {
  H5_CHECK(H5Ldelete(loc, path.c_str(), H5P_DEFAULT));
}

void h5_delete_attr(hid_t obj, const std::string& name) {
  H5_CHECK(H5Adelete(obj, name.c_str()));
}

H5Handle h5_open_object(hid_t loc, const std::string& path) {
  return H5Handle(H5_CHECK(H5Oopen(loc, path.c_str(), H5P_DEFAULT)), H5Oclose);
}

std::vector<std::string> h5_children(hid_t loc, const std::string& group_path) {
  H5Handle g(H5_CHECK(H5Gopen2(loc, group_path.c_str(), H5P_DEFAULT)), H5Gclose);
  H5G_info_t info;
  H5_CHECK(H5Gget_info(g, &info));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = H5_CHECK(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<std::size_t>(n), '\0');
    H5_CHECK(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), n + 1, H5P_DEFAULT));
    names.push_back(name);
  }
  return names;
}

bool h5_is_group(hid_t loc, const std::string& path) {
  return H5Iget_type(h5_open_object(loc, path)) == H5I_GROUP;
}

H5DatasetInfo h5_dataset_info(hid_t loc, const std::string& path) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle space(H5_CHECK(H5Dget_space(d)), H5Sclose);
  H5Handle type(H5_CHECK(H5Dget_type(d)), H5Tclose);
  H5DatasetInfo info;
  int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  info.shape.assign(dims.begin(), dims.end());
  info.type = type_info(type);
  H5Handle plist(H5_CHECK(H5Dget_create_plist(d)), H5Pclose);
  if (H5Pget_layout(plist) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(static_cast<std::size_t>(rank));
    H5_CHECK(H5Pget_chunk(plist, rank, chunk.data()));
    info.chunk.assign(chunk.begin(), chunk.end());
  }
  return info;
}

void h5_read(hid_t loc, const std::string& path, hid_t mem_type, void* out) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5_CHECK(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out));
}

std::optional<H5ChunkExtent> h5_single_chunk(hid_t loc, const std::string& path) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle plist(H5_CHECK(H5Dget_create_plist(d)), H5Pclose);
  if (H5Pget_layout(plist) != H5D_CHUNKED) return std::nullopt;
  H5Handle space(H5_CHECK(H5Dget_space(d)), H5Sclose);
  hsize_t n = 0;
  H5_CHECK(H5Dget_num_chunks(d, space, &n));
  if (n != 1) return std::nullopt;
  H5ChunkExtent e;
  haddr_t addr = 0;
  hsize_t size = 0;
  H5_CHECK(H5Dget_chunk_info(d, space, 0, nullptr, &e.filter_mask, &addr, &size));
  if (addr == HADDR_UNDEF) return std::nullopt;
  e.address = addr;
  e.size = size;
  return e;
}

bool h5_little_endian(hid_t loc, const std::string& path) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle t(H5_CHECK(H5Dget_type(d)), H5Tclose);
  return H5Tget_order(t) == H5T_ORDER_LE;
}

std::optional<uint64_t> h5_contiguous_offset(hid_t loc, const std::string& path) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle plist(H5_CHECK(H5Dget_create_plist(d)), H5Pclose);
  if (H5Pget_layout(plist) != H5D_CONTIGUOUS) return std::nullopt;
  const haddr_t addr = H5Dget_offset(d);
  if (addr == HADDR_UNDEF) return std::nullopt;
  return static_cast<uint64_t>(addr);
}

int h5_filter_count(hid_t loc, const std::string& path) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle plist(H5_CHECK(H5Dget_create_plist(d)), H5Pclose);
  return H5_CHECK(H5Pget_nfilters(plist));
}

H5Handle h5_create_group(hid_t loc, const std::string& path) {
  H5Handle lcpl(H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  H5Handle gcpl(H5_CHECK(H5Pcreate(H5P_GROUP_CREATE)), H5Pclose);
  H5_CHECK(H5Pset_obj_track_times(gcpl, 0));
  return H5Handle(H5_CHECK(H5Gcreate2(loc, path.c_str(), lcpl, gcpl, H5P_DEFAULT)), H5Gclose);
}

void h5_write(hid_t loc, const std::string& path, const std::vector<int64_t>& shape, hid_t file_type, hid_t mem_type, const void* data,
              bool one_chunk) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  H5Handle lcpl(H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  // Parents made here rather than as intermediates, which would carry modification times.
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    if (!h5_exists(loc, path.substr(0, slash))) h5_create_group(loc, path.substr(0, slash));
  H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  H5_CHECK(H5Pset_obj_track_times(dcpl, 0));
  bool empty = false;
  for (auto d : dims) empty |= d == 0;
  if (one_chunk && !empty) H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(dims.size()), dims.data()));
  H5Handle d(H5_CHECK(H5Dcreate2(loc, path.c_str(), file_type, space, lcpl, dcpl, H5P_DEFAULT)), H5Dclose);
  if (!empty) H5_CHECK(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

H5RowAppender::H5RowAppender(hid_t loc, const std::string& path, int64_t cols, int64_t chunk_rows, hid_t file_type) : cols_(cols) {
  const hsize_t dims[2] = {0, static_cast<hsize_t>(cols)}, max[2] = {H5S_UNLIMITED, static_cast<hsize_t>(cols)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(std::max<int64_t>(chunk_rows, 1)), static_cast<hsize_t>(std::max<int64_t>(cols, 1))};
  H5Handle space(H5_CHECK(H5Screate_simple(2, dims, max)), H5Sclose);
  H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  H5_CHECK(H5Pset_obj_track_times(dcpl, 0));
  H5_CHECK(H5Pset_chunk(dcpl, 2, chunk));
  d_ = H5Handle(H5_CHECK(H5Dcreate2(loc, path.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)), H5Dclose);
}

void H5RowAppender::append(const void* rows, int64_t count, hid_t mem_type) {
  if (count <= 0) return;
  const hsize_t size[2] = {static_cast<hsize_t>(rows_ + count), static_cast<hsize_t>(cols_)};
  H5_CHECK(H5Dset_extent(d_, size));
  H5Handle file_space(H5_CHECK(H5Dget_space(d_)), H5Sclose);
  const hsize_t start[2] = {static_cast<hsize_t>(rows_), 0}, block[2] = {static_cast<hsize_t>(count), static_cast<hsize_t>(cols_)};
  H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, block, nullptr));
  H5Handle mem_space(H5_CHECK(H5Screate_simple(2, block, nullptr)), H5Sclose);
  H5_CHECK(H5Dwrite(d_, mem_type, mem_space, file_space, H5P_DEFAULT, rows));
  rows_ += count;
}

void h5_read_rows(hid_t loc, const std::string& path, int64_t row0, int64_t count, hid_t mem_type, void* out) {
  H5Handle d(H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle file_space(H5_CHECK(H5Dget_space(d)), H5Sclose);
  hsize_t dims[2] = {0, 0};
  if (H5_CHECK(H5Sget_simple_extent_ndims(file_space)) != 2) fail(ErrorKind::BadInput, path, " is not a 2-D dataset");
  H5_CHECK(H5Sget_simple_extent_dims(file_space, dims, nullptr));
  if (row0 < 0 || count < 0 || static_cast<hsize_t>(row0 + count) > dims[0])
    fail(ErrorKind::BadInput, path, " has ", dims[0], " rows, not rows ", row0, "..", row0 + count);
  if (count == 0) return;
  const hsize_t start[2] = {static_cast<hsize_t>(row0), 0}, block[2] = {static_cast<hsize_t>(count), dims[1]};
  H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, block, nullptr));
  H5Handle mem_space(H5_CHECK(H5Screate_simple(2, block, nullptr)), H5Sclose);
  H5_CHECK(H5Dread(d, mem_type, mem_space, file_space, H5P_DEFAULT, out));
}

namespace {

// Opens an attribute that must hold one value: a scalar, or a simple dataspace of exactly one
// element (what some writers make of a length-1 array). Anything else would be read into a
// single value's buffer, so it is BadInput here, before any read.
std::optional<H5Handle> open_attr(hid_t obj, const std::string& name) {
  htri_t e = H5Aexists(obj, name.c_str());
  if (e < 0) fail(ErrorKind::BadInput, "attribute ", name, ": cannot be looked up (corrupt metadata?): ", error_stack_message());
  if (e == 0) return std::nullopt;
  H5Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (a.get() < 0) fail(ErrorKind::BadInput, "attribute ", name, ": cannot be opened (corrupt metadata?): ", error_stack_message());
  H5Handle space(H5Aget_space(a), H5Sclose);
  if (space.get() < 0) fail(ErrorKind::BadInput, "attribute ", name, ": unreadable dataspace: ", error_stack_message());
  const H5S_class_t cls = H5Sget_simple_extent_type(space);
  const hssize_t points = H5Sget_simple_extent_npoints(space);
  if (cls == H5S_NULL || points != 1) {
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space))));
    if (!dims.empty()) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    std::string shape = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) shape += (i ? "," : "") + std::to_string(dims[i]);
    fail(ErrorKind::BadInput, "attribute ", name, " has shape ", cls == H5S_NULL ? "null" : shape + "]", ", expected a single value");
  }
  return a;
}

H5TypeInfo attr_type(hid_t attr) {
  H5Handle t(H5_CHECK(H5Aget_type(attr)), H5Tclose);
  return type_info(t);
}

void write_attr(hid_t obj, const std::string& name, hid_t type, const void* value) {
  if (H5Aexists(obj, name.c_str()) > 0) H5_CHECK(H5Adelete(obj, name.c_str()));
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, type, value));
}

}  // namespace

std::optional<int64_t> h5_attr_int(hid_t obj, const std::string& name) {
  auto a = open_attr(obj, name);
  if (!a) return std::nullopt;
  if (attr_type(*a).cls != H5T_INTEGER)
    fail(ErrorKind::BadInput, "attribute ", name, " has type ", attr_type(*a).describe(), ", expected an integer");
  int64_t v = 0;
  H5_CHECK(H5Aread(*a, H5T_NATIVE_INT64, &v));
  return v;
}

std::optional<uint64_t> h5_attr_uint64(hid_t obj, const std::string& name) {
  auto a = open_attr(obj, name);
  if (!a) return std::nullopt;
  if (attr_type(*a).cls != H5T_INTEGER)
    fail(ErrorKind::BadInput, "attribute ", name, " has type ", attr_type(*a).describe(), ", expected an integer");
  uint64_t v = 0;
  H5_CHECK(H5Aread(*a, H5T_NATIVE_UINT64, &v));
  return v;
}

std::optional<double> h5_attr_double(hid_t obj, const std::string& name) {
  auto a = open_attr(obj, name);
  if (!a) return std::nullopt;
  auto t = attr_type(*a);
  if (t.cls != H5T_FLOAT && t.cls != H5T_INTEGER)
    fail(ErrorKind::BadInput, "attribute ", name, " has type ", t.describe(), ", expected a number");
  double v = 0;
  H5_CHECK(H5Aread(*a, H5T_NATIVE_DOUBLE, &v));
  return v;
}

std::optional<std::string> h5_attr_string(hid_t obj, const std::string& name) {
  auto a = open_attr(obj, name);
  if (!a) return std::nullopt;
  H5Handle ftype(H5_CHECK(H5Aget_type(*a)), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING)
    fail(ErrorKind::BadInput, "attribute ", name, " has type ", type_info(ftype).describe(), ", expected a string");
  if (H5Tis_variable_str(ftype) > 0) {
    H5Handle mtype(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    H5_CHECK(H5Tset_size(mtype, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(mtype, H5Tget_cset(ftype)));
    char* s = nullptr;
    H5_CHECK(H5Aread(*a, mtype, &s));
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::size_t n = H5Tget_size(ftype);
  if (n == 0 || n > (1u << 20)) fail(ErrorKind::BadInput, "attribute ", name, " is a string of ", n, " bytes, expected 1 B to 1 MiB");
  std::string buf(n, '\0');
  H5_CHECK(H5Aread(*a, ftype, buf.data()));
  auto end = buf.find('\0');
  if (end != std::string::npos) buf.resize(end);
  while (!buf.empty() && buf.back() == ' ') buf.pop_back();  // H5T_STR_SPACEPAD
  return buf;
}

void h5_set_attr(hid_t obj, const std::string& name, int64_t value) {
  write_attr(obj, name, H5T_NATIVE_INT64, &value);
}
void h5_set_attr_uint64(hid_t obj, const std::string& name, uint64_t value) {
  write_attr(obj, name, H5T_NATIVE_UINT64, &value);
}
void h5_set_attr(hid_t obj, const std::string& name, double value) {
  write_attr(obj, name, H5T_NATIVE_DOUBLE, &value);
}
void h5_set_attr(hid_t obj, const std::string& name, const std::string& value) {
  H5Handle t(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  const char* p = value.c_str();
  if (H5Aexists(obj, name.c_str()) > 0) H5_CHECK(H5Adelete(obj, name.c_str()));
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(H5_CHECK(H5Acreate2(obj, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  H5_CHECK(H5Awrite(a, t, &p));
}

namespace {

struct MetadataWalk {
  std::string object;  // the object being walked, for messages
  std::string error;
};

// Attribute values up to this size are read (so their storage is touched); larger ones only sized.
constexpr std::size_t kWalkAttrBytes = 16u << 20;

herr_t walk_attribute(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto* w = static_cast<MetadataWalk*>(data);
  auto bad = [&](const char* what) {
    w->error = str(w->object, ": attribute ", name, ": ", what, ": ", error_stack_text());
    return herr_t{-1};
  };
  if (H5Aexists(loc, name) <= 0) return bad("lookup by name failed");
  H5Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (a.get() < 0) return bad("cannot be opened");
  H5Handle type(H5Aget_type(a), H5Tclose);
  H5Handle space(H5Aget_space(a), H5Sclose);
  if (type.get() < 0 || space.get() < 0) return bad("unreadable type or dataspace");
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  const std::size_t size = H5Tget_size(type);
  if (n < 0 || size == 0) return bad("invalid dataspace or type size");
  if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0) {
    if (static_cast<std::size_t>(n) > kWalkAttrBytes / sizeof(char*)) return 0;
    std::vector<char*> strings(static_cast<std::size_t>(n), nullptr);
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));  // no conversion between ASCII and UTF-8
    const herr_t rc = H5Aread(a, mem, strings.data());
    for (char* p : strings) H5free_memory(p);
    return rc < 0 ? bad("value unreadable") : 0;
  }
  if (H5Tdetect_class(type, H5T_VLEN) > 0 || H5Tdetect_class(type, H5T_REFERENCE) > 0) return 0;
  if (static_cast<std::size_t>(n) > kWalkAttrBytes / size) return 0;
  std::vector<unsigned char> buf(static_cast<std::size_t>(n) * size);
  return H5Aread(a, type, buf.data()) < 0 ? bad("value unreadable") : 0;
}

herr_t walk_object(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto* w = static_cast<MetadataWalk*>(data);
  w->object = std::string(name[0] == '.' && name[1] == 0 ? "/" : name);
  if (H5Aiterate_by_name(root, name, H5_INDEX_NAME, H5_ITER_INC, nullptr, walk_attribute, w, H5P_DEFAULT) < 0) {
    if (w->error.empty()) w->error = str(w->object, ": attributes unreadable: ", error_stack_text());
    return -1;
  }
  if (info->type != H5O_TYPE_DATASET) return 0;
  auto bad = [&](const char* what) {
    w->error = str(w->object, ": ", what, ": ", error_stack_text());
    return herr_t{-1};
  };
  H5Handle d(H5Dopen2(root, name, H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) return bad("dataset cannot be opened");
  H5Handle space(H5Dget_space(d), H5Sclose), type(H5Dget_type(d), H5Tclose), plist(H5Dget_create_plist(d), H5Pclose);
  if (space.get() < 0 || type.get() < 0 || plist.get() < 0) return bad("dataspace, type or creation properties unreadable");
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > 32) return bad("invalid dataspace rank");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0) return bad("dimensions unreadable");
  if (H5Pget_nfilters(plist) < 0) return bad("filter pipeline unreadable");
  if (H5Pget_layout(plist) == H5D_CHUNKED) {
    hsize_t chunks = 0;
    if (H5Dget_num_chunks(d, space, &chunks) < 0) return bad("chunk index unreadable");
    // The chunk index (a B-tree) is walked for a bounded number of entries: enough to touch
    // every node of the one-chunk-per-matrix layout, and not a scan of a huge sparse dataset.
    for (hsize_t i = 0; i < std::min<hsize_t>(chunks, 4096); ++i) {
      unsigned mask = 0;
      haddr_t addr = 0;
      hsize_t size = 0;
      if (H5Dget_chunk_info(d, space, i, nullptr, &mask, &addr, &size) < 0) return bad("chunk index unreadable");
    }
  }
  return 0;
}

}  // namespace

void h5_walk_metadata(hid_t f, const std::string& path) {
  MetadataWalk w;
  if (H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, walk_object, &w, H5O_INFO_BASIC) < 0) {
    h5_rethrow_driver_error();  // the store failed, not the file
    if (w.error.empty()) w.error = str(w.object.empty() ? "/" : w.object, ": object headers unreadable: ", error_stack_message());
    fail(ErrorKind::BadInput, path, ": corrupt HDF5 metadata: ", w.error);
  }
}

}  // namespace moerun::io
