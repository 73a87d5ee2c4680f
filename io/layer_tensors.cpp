// A layer's tensors by name: a short list searched linearly (a layer has at most about 20).
#include "io/layer_tensors.hpp"

#include "base/error.hpp"

namespace moerun::io {

DenseTensor& LayerTensors::place(const model::DenseDataset& row) {
  if (find(row.name)) fail(ErrorKind::Internal, "LayerTensors: two rows named ", row.path);
  DenseTensor t = row.matrix || row.float32_matrix ? DenseTensor(WeightMatrix{}) : DenseTensor(std::vector<float>{});
  return tensors_.emplace_back(row.name, std::move(t)).second;
}

DenseTensor* LayerTensors::find(const std::string& name) {
  for (auto& [n, t] : tensors_)
    if (n == name) return &t;
  return nullptr;
}

WeightMatrix* LayerTensors::matrix(const std::string& name) {
  DenseTensor* t = find(name);
  return t ? std::get_if<WeightMatrix>(t) : nullptr;
}

std::vector<float>* LayerTensors::vector(const std::string& name) {
  DenseTensor* t = find(name);
  return t ? std::get_if<std::vector<float>>(t) : nullptr;
}

WeightMatrix LayerTensors::take_matrix(const std::string& name) {
  WeightMatrix* m = matrix(name);
  if (!m) {
    if (vector(name)) fail(ErrorKind::Internal, "LayerTensors: ", name, " is held as a vector, not a matrix");
    return {};
  }
  return std::exchange(*m, WeightMatrix{});
}

std::vector<float> LayerTensors::take_vector(const std::string& name) {
  std::vector<float>* v = vector(name);
  if (!v) {
    if (matrix(name)) fail(ErrorKind::Internal, "LayerTensors: ", name, " is held as a matrix, not a vector");
    return {};
  }
  return std::exchange(*v, std::vector<float>{});
}

void LayerTensors::take(std::initializer_list<std::pair<const char*, WeightMatrix*>> matrices,
                        std::initializer_list<std::pair<const char*, std::vector<float>*>> vectors) {
  for (const auto& [name, m] : matrices) *m = take_matrix(name);
  for (const auto& [name, v] : vectors) *v = take_vector(name);
}

bool LayerTensors::all_taken() const {
  for (const auto& [name, t] : tensors_) {
    const auto* v = std::get_if<std::vector<float>>(&t);
    if (v ? !v->empty() : std::get<WeightMatrix>(t).rows > 0) return false;
  }
  return true;
}

}  // namespace moerun::io
