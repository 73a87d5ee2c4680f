// Affinity graph HDF5 reader and writer.
#include "io/affinity_file.hpp"

#include <climits>
#include <cstdio>

#include "base/error.hpp"
#include "io/hdf5.hpp"
#include "model/model_config.hpp"
#include "io/output_file.hpp"

namespace moerun::io {

void write_affinity_graph(const std::string& path, const AffinityGraph& g) {
  const int64_t L = g.num_layers, E = g.num_experts;
  replace_file_atomically(path, [&](const std::string& tmp) {
    H5Handle f = h5_open_file(tmp, H5Mode::Create);
    h5_writing(path, [&] {
      h5_set_attr(f, "format", std::string("moe-affinity"));
      h5_set_attr(f, "format_version", int64_t{1});
      h5_set_attr(f, "num_layers", L);
      h5_set_attr(f, "num_experts", E);
      h5_set_attr(f, "top_k", g.top_k);
      h5_set_attr(f, "tokens", g.tokens);
      const int64_t Ln = std::max<int64_t>(L - 1, 0);
      h5_write(f, "/next_counts", {Ln, E, E}, H5T_STD_I64LE, H5T_NATIVE_INT64, g.next_counts.data(), false);
      h5_write(f, "/next", {Ln, E, E}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, g.next.data(), false);
      h5_write(f, "/coactivation_counts", {L, E, E}, H5T_STD_I64LE, H5T_NATIVE_INT64, g.coactivation_counts.data(), false);
      h5_write(f, "/coactivation", {L, E, E}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, g.coactivation.data(), false);
      h5_write(f, "/frequency", {L, E}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, g.frequency.data(), false);
    });
    h5_close_written(f, path);
  });
}

AffinityGraph read_affinity_graph(const std::string& path) {
  H5Handle f = h5_open_file(path, H5Mode::ReadOnly);
  return h5_reading(path, [&] {
    auto fmt = h5_attr_string(f, "format");
    if (!fmt || *fmt != "moe-affinity") fail(ErrorKind::BadInput, path, ": not a moe-affinity file (format attribute)");
    auto req = [&](const char* n, int64_t limit) {
      auto v = h5_attr_int(f, n);
      if (!v || *v < 0 || *v > limit) fail(ErrorKind::BadInput, path, ": root attribute ", n, " is missing or not in [0, ", limit, "]");
      return *v;
    };
    AffinityGraph g;
    g.source = path;
    // Bounded before anything is sized from them: the graph holds layers x experts^2 counts.
    g.num_layers = req("num_layers", model::kMaxLayers);
    g.num_experts = req("num_experts", model::kMaxExperts);
    g.top_k = req("top_k", g.num_experts);
    g.tokens = req("tokens", INT64_MAX);
    const int64_t L = g.num_layers, E = g.num_experts, Ln = std::max<int64_t>(L - 1, 0);
    if (L * E * E > (int64_t{1} << 28))
      fail(ErrorKind::BadInput, path, ": ", L, " layers x ", E, "^2 experts is more than an affinity graph may hold (2^28 edges)");
    auto load = [&](const char* name, std::vector<int64_t> shape, hid_t mem, auto& out) {
      if (!h5_exists(f, name)) fail(ErrorKind::BadInput, path, ": dataset ", name, " is missing");
      if (h5_dataset_info(f, name).shape != shape) fail(ErrorKind::BadInput, path, ": ", name, " has the wrong shape");
      int64_t n = 1;
      for (auto s : shape) n *= s;
      out.resize(static_cast<std::size_t>(n));
      if (n) h5_read(f, name, mem, out.data());
    };
    load("/next_counts", {Ln, E, E}, H5T_NATIVE_INT64, g.next_counts);
    load("/next", {Ln, E, E}, H5T_NATIVE_DOUBLE, g.next);
    load("/coactivation_counts", {L, E, E}, H5T_NATIVE_INT64, g.coactivation_counts);
    load("/coactivation", {L, E, E}, H5T_NATIVE_DOUBLE, g.coactivation);
    load("/frequency", {L, E}, H5T_NATIVE_DOUBLE, g.frequency);
    return g;
  });
}

}  // namespace moerun::io
