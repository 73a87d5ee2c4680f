// Routing trace HDF5 reader and writer.
#include "io/routing_trace.hpp"

#include <cstdio>
#include <filesystem>

#include "io/hdf5.hpp"

namespace moerun::io {

void write_routing_trace(const std::string& path, const RoutingTrace& t) {
  const std::string tmp = path + ".tmp";
  {
    H5Handle f = h5_open_file(tmp, H5Mode::Create);
    h5_set_attr(f, "format", std::string("moe-trace"));
    h5_set_attr(f, "format_version", int64_t{1});
    h5_set_attr(f, "num_layers", t.num_layers);
    h5_set_attr(f, "num_experts", t.num_experts);
    h5_set_attr(f, "top_k", t.top_k);
    for (int64_t l = 0; l < t.num_layers; ++l)
      h5_write(f, "/layers/" + std::to_string(l) + "/experts", {t.tokens(), t.top_k}, H5T_STD_I32LE, H5T_NATIVE_INT32,
               t.experts[static_cast<std::size_t>(l)].data(), false);
    h5_write(f, "/tokens/request", {t.tokens()}, H5T_STD_I64LE, H5T_NATIVE_INT64, t.request.data(), false);
    h5_write(f, "/tokens/position", {t.tokens()}, H5T_STD_I32LE, H5T_NATIVE_INT32, t.position.data(), false);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(ErrorKind::Io, path, ": cannot rename trace into place");
}

std::vector<std::string> routing_trace_files(const std::string& path) {
  std::vector<std::string> out;
  for (int r = 0;; ++r) {
    const std::string f = r == 0 ? path : path + "." + std::to_string(r);
    if (!std::filesystem::exists(f)) break;
    out.push_back(f);
  }
  return out;
}

RoutingTrace read_routing_trace(const std::string& path) {
  H5Handle f = h5_open_file(path, H5Mode::ReadOnly);
  RoutingTrace t;
  auto req = [&](const char* n) {
    auto v = h5_attr_int(f, n);
    if (!v) fail(ErrorKind::BadInput, path, ": root attribute ", n, " is missing");
    return *v;
  };
  auto fmt = h5_attr_string(f, "format");
  if (!fmt || *fmt != "moe-trace") fail(ErrorKind::BadInput, path, ": not a moe-trace file (format attribute)");
  t.num_layers = req("num_layers");
  t.num_experts = req("num_experts");
  t.top_k = req("top_k");
  if (!h5_exists(f, "/tokens/request")) fail(ErrorKind::BadInput, path, ": dataset /tokens/request is missing");
  auto info = h5_dataset_info(f, "/tokens/request");
  const int64_t n = info.shape.empty() ? 0 : info.shape[0];
  t.request.resize(static_cast<std::size_t>(n));
  t.position.resize(static_cast<std::size_t>(n));
  if (n) {
    h5_read(f, "/tokens/request", H5T_NATIVE_INT64, t.request.data());
    h5_read(f, "/tokens/position", H5T_NATIVE_INT32, t.position.data());
  }
  t.experts.resize(static_cast<std::size_t>(t.num_layers));
  for (int64_t l = 0; l < t.num_layers; ++l) {
    const std::string p = "/layers/" + std::to_string(l) + "/experts";
    if (!h5_exists(f, p)) fail(ErrorKind::BadInput, path, ": dataset ", p, " is missing");
    auto li = h5_dataset_info(f, p);
    if (li.shape != std::vector<int64_t>{n, t.top_k})
      fail(ErrorKind::BadInput, path, ": ", p, " does not have shape [tokens, top_k]");
    auto& v = t.experts[static_cast<std::size_t>(l)];
    v.resize(static_cast<std::size_t>(n * t.top_k));
    if (n) h5_read(f, p, H5T_NATIVE_INT32, v.data());
  }
  return t;
}

}  // namespace moerun::io
