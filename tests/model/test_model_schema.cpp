// The schema of model.h5 (model/model_schema, model/model_attributes) against the files it writes
// and the document that describes it: for every family, every attribute row round-trips through a
// real model.h5, the file holds exactly the dataset rows, the parameter count is the file's, and
// docs name every row.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "convert/synthetic_model.hpp"
#include "io/hdf5.hpp"
#include "io/model_file.hpp"
#include "model/model_attributes.hpp"
#include "model/model_family.hpp"
#include "model/model_schema.hpp"
#include "tests/test_support.hpp"

namespace moerun::model {
namespace {
namespace fs = std::filesystem;

// A small model of `family` as `moerun synth --family` makes it (the integration tests' sizes), with
// a dense first layer so that the MLP rows of both kinds are written.
convert::SynthConfig family_model(const std::string& family) {
  convert::SynthConfig s;
  ModelConfig& m = s.model;
  m.vocab_size = 64;
  m.hidden_size = 64;
  m.num_layers = 4;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.intermediate_size = 32;
  m.num_experts = 4;
  m.top_k = 2;
  m.max_position = 128;
  m.bos_token_id = 1;
  m.eos_token_id = 63;
  convert::apply_family(family, m);
  if (m.layer_mlp.empty()) {
    m.layer_mlp = {MlpKind::Dense, MlpKind::Moe, MlpKind::Moe, MlpKind::Moe};
    m.dense_intermediate_size = 48;
  }
  s.shards = 1;
  return s;
}

// Every dataset under `group` of an open file, by path.
void walk_datasets(hid_t file, const std::string& group, std::set<std::string>& out) {
  for (const std::string& name : io::h5_children(file, group)) {
    const std::string path = (group == "/" ? "/" : group + "/") + name;
    if (io::h5_is_group(file, path))
      walk_datasets(file, path, out);
    else
      out.insert(path);
  }
}

TEST(ModelSchema, EveryFamilyWritesAndReadsEveryRow) {
  for (const ModelFamily* family : model_families()) {
    SCOPED_TRACE(family->name);
    const std::string dir = moerun::testing::scratch_dir(std::string("schema-") + family->name).string();
    const convert::SynthConfig s = family_model(family->name);
    convert::write_synthetic_model(dir, s, true);
    const ModelConfig c = io::read_model_config(dir);
    for (const ModelAttribute& a : model_attributes()) EXPECT_EQ(a.write(c), a.write(s.model)) << a.name;
    EXPECT_EQ(c.format_version, required_format_version(s.model));

    io::H5Handle file = io::h5_open_file(dir + "/model.h5", io::H5Mode::ReadOnly);
    std::set<std::string> stored;
    walk_datasets(file, "/", stored);
    stored.erase("/expert_shards");
    std::set<std::string> rows;
    int64_t parameters = 0;
    for (const DenseDataset& ds : dense_datasets(c)) {
      rows.insert(ds.path);
      ASSERT_TRUE(stored.count(ds.path)) << ds.path;
      EXPECT_EQ(io::h5_dataset_info(file, ds.path).shape, ds.shape) << ds.path;
      if (ds.parameter) parameters += ds.elements();
      EXPECT_FALSE(ds.checkpoint.empty()) << ds.path;
    }
    EXPECT_EQ(stored, rows);
    EXPECT_EQ(c.dense_params(), parameters);
    fs::remove_all(dir);
  }
}

// True when `name` occurs in `text` as a whole word (not inside a longer identifier).
bool names_word(const std::string& text, const std::string& name) {
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (std::size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1))
    if ((at == 0 || !ident(text[at - 1])) && (at + name.size() == text.size() || !ident(text[at + name.size()]))) return true;
  return false;
}

// What the families' synth configs write, together, covers every attribute and dataset kind.
TEST(ModelSchema, DocsNameEveryRow) {
  std::string docs;
  for (const char* name : {"docs/FORMATS.md", "docs/DESIGN.md"}) {
    std::ifstream in(fs::path(MOERUN_SOURCE_DIR) / name);
    ASSERT_TRUE(in) << name;
    std::stringstream text;
    text << in.rdbuf();
    docs += text.str();
  }
  for (const ModelAttribute& a : model_attributes()) EXPECT_TRUE(names_word(docs, a.name)) << a.name;
  std::set<std::string> names;
  for (const ModelFamily* family : model_families())
    for (const DenseDataset& ds : dense_datasets(family_model(family->name).model)) names.insert(ds.name);
  EXPECT_GT(names.size(), 30u);
  for (const std::string& name : names) EXPECT_TRUE(names_word(docs, name)) << name;
}

}  // namespace
}  // namespace moerun::model
