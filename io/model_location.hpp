// Where a model lives (DESIGN §3): a local directory, or an object-store prefix s3://bucket/prefix
// holding the same files. Readers (model.h5, the shard index) open files through it, so the rest of
// io/ does not care which. Remote files are opened with HDF5's ros3 driver after a HEAD through
// ObjectStore, which retries and words authentication and reachability errors clearly.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "io/hdf5.hpp"
#include "io/object_store.hpp"

namespace moerun::io {

class ModelLocation {
 public:
  // A local directory (implicit: tools and tests pass plain paths).
  ModelLocation(std::string dir);  // NOLINT(google-explicit-constructor)
  ModelLocation(const char* dir) : ModelLocation(std::string(dir)) {}  // NOLINT
  // An object-store prefix.
  ModelLocation(const S3Url& prefix, std::shared_ptr<const ObjectStore> store);

  bool remote() const { return store_ != nullptr; }
  const std::string& str() const { return name_; }  // as given: DIR or s3://bucket/prefix
  std::string file(const std::string& name) const;  // DIR/name or s3://bucket/prefix/name
  // Local: checks the directory exists (Io otherwise). Remote: nothing to check without a request.
  void check_exists() const;
  H5Handle open(const std::string& name) const;
  // Names of the expert shards (experts-NNNNN.h5), sorted; BadInput when there are none.
  std::vector<std::string> shard_names() const;
  // Local: the paths of model.h5 and every shard that exist (for the HDF5 probe and the check that
  // no output overwrites the model). Remote: none.
  std::vector<std::string> local_files() const;
  // Every entry of a local model directory (model.h5, shards, tokenizer files, the caches kept
  // next to them): what no output of a run may name. Empty for an object store.
  std::vector<std::string> input_files() const;
  // What the HDF5 probe walks: local_files(), or in an object store the URLs of model.h5 and of
  // every shard (one listing).
  std::vector<std::string> probe_files() const;

  const ObjectStore* store() const { return store_.get(); }
  S3Url url(const std::string& name) const { return prefix_.child(name); }

 private:
  std::string name_;
  S3Url prefix_;
  std::shared_ptr<const ObjectStore> store_;
};

// DIR, or s3://bucket/prefix with an ObjectStore made from `s3` (Usage error without credentials).
ModelLocation model_location(const std::string& uri, const S3Config& s3);

}  // namespace moerun::io
