// LayerTensors: rows placed in the form the schema says, taken once by name, absent rows empty,
// a row taken in the wrong form or placed twice refused.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "io/layer_tensors.hpp"

namespace moerun::io {
namespace {

model::DenseDataset row(const std::string& name, std::vector<int64_t> shape, bool matrix, bool float32_matrix = false) {
  model::DenseDataset ds{"/layers/0/" + name, name, 0, std::move(shape)};
  ds.matrix = matrix;
  ds.float32_matrix = float32_matrix;
  return ds;
}

TEST(LayerTensors, PlacesEachRowInItsForm) {
  LayerTensors t;
  EXPECT_TRUE(std::holds_alternative<WeightMatrix>(t.place(row("wq", {8, 4}, true))));
  EXPECT_TRUE(std::holds_alternative<WeightMatrix>(t.place(row("gate", {4, 4}, false, true))));
  // Two dimensions but held widened as a vector (the shared expert's gate, the conv taps).
  EXPECT_TRUE(std::holds_alternative<std::vector<float>>(t.place(row("shared_expert_gate", {1, 4}, false))));
  EXPECT_NE(t.matrix("wq"), nullptr);
  EXPECT_EQ(t.vector("wq"), nullptr);
  EXPECT_EQ(t.matrix("absent"), nullptr);
  EXPECT_THROW(t.place(row("wq", {8, 4}, true)), Error) << "two rows of one name";
}

TEST(LayerTensors, TakesEachTensorOnce) {
  LayerTensors t;
  std::get<WeightMatrix>(t.place(row("wo", {2, 3}, true))).allocate(DType::F32, 2, 3);
  std::get<std::vector<float>>(t.place(row("bo", {2}, false))).assign(2, 0.5f);
  EXPECT_FALSE(t.all_taken());
  WeightMatrix wo;
  std::vector<float> bo, absent{1.0f};
  t.take({{"wo", &wo}}, {{"bo", &bo}, {"sinks", &absent}});
  EXPECT_EQ(wo.rows, 2);
  EXPECT_EQ(wo.cols, 3);
  EXPECT_EQ(bo, std::vector<float>(2, 0.5f));
  EXPECT_TRUE(absent.empty()) << "a row the layer does not have is taken as empty";
  EXPECT_TRUE(t.all_taken());
  EXPECT_EQ(t.take_matrix("wo").rows, 0) << "taken already";
  EXPECT_THROW(t.take_matrix("bo"), Error) << "a vector taken as a matrix";
  EXPECT_THROW(t.take_vector("wo"), Error) << "a matrix taken as a vector";
}

}  // namespace
}  // namespace moerun::io
