// A synthetic model written to a scratch directory and loaded for one process: its dense weights
// (each ModelForward takes the layers' tensors: fresh_dense() loads another set), every expert resident, a local MoE layer over them (the model-forward
// tests' set-up).
#pragma once
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>

#include "experts/backend.hpp"
#include "experts/resident_experts.hpp"
#include "io/expert_shards.hpp"
#include "io/model_file.hpp"
#include "io/model_location.hpp"
#include "convert/synthetic_model.hpp"
#include "runtime/model_forward.hpp"
#include "runtime/moe_layer.hpp"
#include "tests/test_support.hpp"

namespace moerun::testing {

struct LocalModel {
  LocalModel(const std::string& prefix, const convert::SynthConfig& synth) : dir(scratch_dir(prefix)) {
    convert::write_synthetic_model((dir / "model").string(), synth, true);
    loc.emplace(io::model_location((dir / "model").string(), {}));
    config = io::read_model_config(*loc);
    index = std::make_unique<io::ExpertShardIndex>(io::ExpertShardIndex::build(*loc, config));
    backend = experts::make_expert_backend({}, config, mm);
    store = std::make_unique<experts::ResidentExperts>(*backend, *index, config, [](int64_t, int64_t) { return true; });
    moe = std::make_unique<runtime::LocalMoeLayer>(*backend, *store, config.hidden_size, config.num_experts);
  }
  ~LocalModel() { std::filesystem::remove_all(dir); }
  // The dense weights loaded anew, for one ModelForward (it takes the layers' tensors).
  io::DenseWeights& fresh_dense() { return loaded.emplace_back(io::load_dense_weights(*loc)); }
  runtime::KvCache fresh_cache(int64_t positions) const {
    runtime::KvCache kv;
    kv.init(config.num_layers, config.kv_k_dim(), config.kv_v_dim(), positions);
    return kv;
  }

  std::filesystem::path dir;
  std::optional<io::ModelLocation> loc;
  model::ModelConfig config;
  Matmul mm;
  std::deque<io::DenseWeights> loaded;  // each fresh_dense()'s, alive as long as the model
  std::unique_ptr<io::ExpertShardIndex> index;
  std::unique_ptr<experts::ExpertBackend> backend;
  std::unique_ptr<experts::ResidentExperts> store;
  std::unique_ptr<runtime::MoeLayer> moe;
};

}  // namespace moerun::testing
