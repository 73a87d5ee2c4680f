// Routing trace HDF5 reader and writer.
#include "io/routing_trace.hpp"

#include <cstdio>
#include <filesystem>

#include "base/host.hpp"
#include "io/hdf5.hpp"
#include "model/model_config.hpp"
#include "io/output_file.hpp"

namespace moerun::io {

void write_routing_trace(const std::string& path, const RoutingTrace& t) {
  replace_file_atomically(path, [&](const std::string& tmp) {
    H5Handle f = h5_open_file(tmp, H5Mode::Create);
    h5_writing(path, [&] {
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
    });
    h5_close_written(f, path);
  });
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
  return h5_reading(path, [&] {
    RoutingTrace t;
    auto req = [&](const char* n, int64_t lo, int64_t hi) {
      auto v = h5_attr_int(f, n);
      if (!v || *v < lo || *v > hi) fail(ErrorKind::BadInput, path, ": root attribute ", n, " is missing or not in [", lo, ", ", hi, "]");
      return *v;
    };
    auto fmt = h5_attr_string(f, "format");
    if (!fmt || *fmt != "moe-trace") fail(ErrorKind::BadInput, path, ": not a moe-trace file (format attribute)");
    t.num_layers = req("num_layers", 1, model::kMaxLayers);
    t.num_experts = req("num_experts", 1, model::kMaxExperts);
    t.top_k = req("top_k", 1, t.num_experts);
    if (t.num_layers * t.num_experts * t.num_experts > (int64_t{1} << 28))
      fail(ErrorKind::BadInput, path, ": ", t.num_layers, " layers x ", t.num_experts,
           "^2 experts is more than an affinity graph may hold (2^28 edges)");
    if (!h5_exists(f, "/tokens/request")) fail(ErrorKind::BadInput, path, ": dataset /tokens/request is missing");
    if (!h5_exists(f, "/tokens/position")) fail(ErrorKind::BadInput, path, ": dataset /tokens/position is missing");
    const auto info = h5_dataset_info(f, "/tokens/request");
    if (info.shape.size() != 1) fail(ErrorKind::BadInput, path, ": /tokens/request is not a vector");
    const int64_t n = info.shape[0];
    if (h5_dataset_info(f, "/tokens/position").shape != info.shape)
      fail(ErrorKind::BadInput, path, ": /tokens/position does not have the shape of /tokens/request");
    // Everything the trace will take in memory, before any of it is allocated.
    const int64_t need = n * (12 + 4 * t.top_k * t.num_layers), have = host_memory_bytes();
    if (n > (int64_t{1} << 40) || (have > 0 && need > have / 2))
      fail(ErrorKind::BadInput, path, ": ", n, " traced tokens would take ", need >> 20, " MiB, more than half this host's memory");
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
      if (h5_dataset_info(f, p).shape != std::vector<int64_t>{n, t.top_k})
        fail(ErrorKind::BadInput, path, ": ", p, " does not have shape [tokens, top_k]");
      auto& v = t.experts[static_cast<std::size_t>(l)];
      v.resize(static_cast<std::size_t>(n * t.top_k));
      if (n) h5_read(f, p, H5T_NATIVE_INT32, v.data());
    }
    return t;
  });
}

}  // namespace moerun::io
