// Local and object-store model locations.
#include "io/model_location.hpp"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "io/hdf5_object_store.hpp"

namespace moerun::io {
namespace {
const std::regex& shard_pattern() {
  static const std::regex p(R"(experts-\d+\.h5)");
  return p;
}
}  // namespace

ModelLocation::ModelLocation(std::string dir) : name_(std::move(dir)) {}

ModelLocation::ModelLocation(const S3Url& prefix, std::shared_ptr<const ObjectStore> store)
    : name_(prefix.str()), prefix_(prefix), store_(std::move(store)) {}

std::string ModelLocation::file(const std::string& name) const {
  return remote() ? prefix_.child(name).str() : (std::filesystem::path(name_) / name).string();
}

void ModelLocation::check_exists() const {
  if (remote()) return;
  std::error_code ec;
  if (!std::filesystem::is_directory(name_, ec)) fail(ErrorKind::Io, name_, ": model directory does not exist");
}

H5Handle ModelLocation::open(const std::string& name) const {
  if (!remote()) return h5_open_file(file(name), H5Mode::ReadOnly);
  const S3Url u = url(name);
  return h5_open_object_store_file(*store_, u);
}

std::vector<std::string> ModelLocation::shard_names() const {
  std::vector<std::string> names;
  if (remote()) {
    const std::string lead = prefix_.key.empty() ? "" : prefix_.key + "/";
    for (const ObjectInfo& o : store_->list(prefix_)) {
      const std::string name = o.key.substr(lead.size());
      if (std::regex_match(name, shard_pattern())) names.push_back(name);
    }
  } else {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(name_, ec)) {
      const std::string name = entry.path().filename().string();
      if (std::regex_match(name, shard_pattern())) names.push_back(name);
    }
    if (ec) fail(ErrorKind::Io, name_, ": cannot list directory: ", ec.message());
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) fail(ErrorKind::BadInput, name_, ": no expert shards (experts-*.h5) found");
  return names;
}

std::vector<std::string> ModelLocation::local_files() const {
  std::vector<std::string> files;
  if (remote()) return files;
  std::error_code ec;
  if (!std::filesystem::is_directory(name_, ec)) return files;
  if (std::filesystem::exists(file("model.h5"), ec)) files.push_back(file("model.h5"));
  std::vector<std::string> shards;
  for (const auto& entry : std::filesystem::directory_iterator(name_, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, shard_pattern())) shards.push_back(file(name));
  }
  std::sort(shards.begin(), shards.end());
  files.insert(files.end(), shards.begin(), shards.end());
  return files;
}

std::vector<std::string> ModelLocation::input_files() const {
  std::vector<std::string> files;
  std::error_code ec;
  if (remote() || !std::filesystem::is_directory(name_, ec)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(name_, ec)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> ModelLocation::probe_files() const {
  if (!remote()) return local_files();
  std::vector<std::string> files{file("model.h5")};
  for (const std::string& name : shard_names()) files.push_back(file(name));
  return files;
}

ModelLocation model_location(const std::string& uri, const S3Config& s3) {
  if (!is_s3_url(uri)) return ModelLocation(uri);
  const S3Url url = parse_s3_url(uri);  // a malformed URL is reported before missing credentials
  return ModelLocation(url, std::make_shared<const ObjectStore>(s3));
}

}  // namespace moerun::io
