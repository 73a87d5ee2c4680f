// A decoder layer's dense tensors as model.h5 holds them, by their schema row's name ("wq",
// "mlp/w1", "indexer/wk"): a float32 vector or a matrix, as the row says. The loader fills one per
// layer in schema order; the layer blocks (runtime/blocks) then take theirs by the same names, so a
// new tensor is a schema row and the line of the block that takes it, with no slot list between.
#pragma once
#include <initializer_list>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/matmul.hpp"
#include "model/model_schema.hpp"

namespace moerun::io {

using DenseTensor = std::variant<std::vector<float>, WeightMatrix>;

class LayerTensors {
 public:
  // The row's place, created empty in the form it is held in (a matrix, or a float32 vector;
  // the gate: a float32 matrix). Internal error for a second row of the same name.
  DenseTensor& place(const model::DenseDataset& row);
  // The tensor of that name, or null when the layer has none (a variant the config turns off);
  // empty once taken.
  WeightMatrix* matrix(const std::string& name);
  std::vector<float>* vector(const std::string& name);
  const WeightMatrix* matrix(const std::string& name) const { return const_cast<LayerTensors*>(this)->matrix(name); }
  const std::vector<float>* vector(const std::string& name) const { return const_cast<LayerTensors*>(this)->vector(name); }
  // Take it out (a block owns it from then on); empty when the layer has none.
  WeightMatrix take_matrix(const std::string& name);
  std::vector<float> take_vector(const std::string& name);
  // Each named tensor taken into its place: t.take({{"wq", &w.wq}}, {{"bq", &w.bq}}).
  void take(std::initializer_list<std::pair<const char*, WeightMatrix*>> matrices,
            std::initializer_list<std::pair<const char*, std::vector<float>*>> vectors = {});
  // Whether every tensor was taken (the blocks' binding left none behind).
  bool all_taken() const;
  // What is left, in schema order (the fingerprint reads them before the blocks take any).
  const std::vector<std::pair<std::string, DenseTensor>>& items() const { return tensors_; }
  std::vector<std::pair<std::string, DenseTensor>>& items() { return tensors_; }

 private:
  DenseTensor* find(const std::string& name);
  std::vector<std::pair<std::string, DenseTensor>> tensors_;
};

}  // namespace moerun::io
