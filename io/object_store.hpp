// The object-store client of the L3 tier (DESIGN §5): S3 over HTTP(S) with AWS SigV4 (libcurl's
// CURLOPT_AWS_SIGV4), path-style URLs, ranged GETs, and retries with exponential backoff and jitter
// on 5xx, throttling, timeouts and resets. Credentials are never printed.
#pragma once
#include "base/counter_fields.hpp"
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace moerun::io {

// Settings; launch/ fills them from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and the --s3-* options.
struct S3Config {
  std::string endpoint;  // http(s)://host[:port]; empty: https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";
  std::string access_key_id, secret_access_key, session_token;
  int retries = 5;  // attempts after the first, for transient failures
  double backoff_s = 0.2;  // delay before the first retry; doubles each time, with jitter
  double max_backoff_s = 5.0;  // cap on one delay
  double timeout_s = 60.0;  // one request, connection included
  double connect_timeout_s = 5.0;

  std::string endpoint_url() const;  // endpoint, or the AWS default for the region
};

// s3://bucket/key-or-prefix (the key without leading or trailing '/').
struct S3Url {
  std::string bucket, key;
  std::string str() const { return "s3://" + bucket + (key.empty() ? "" : "/" + key); }
  S3Url child(const std::string& name) const { return {bucket, key.empty() ? name : key + "/" + name}; }
};
bool is_s3_url(const std::string& s);
// Throws Usage on "s3://" without a bucket or with an empty path segment.
S3Url parse_s3_url(const std::string& s);

struct ObjectStoreStats {
  int64_t requests = 0;  // HTTP requests sent, retries included
  int64_t retries = 0;
  int64_t bytes = 0;  // body bytes received

  static const std::vector<CounterField<ObjectStoreStats>>& fields() {
    static const std::vector<CounterField<ObjectStoreStats>> f{counter("requests", &ObjectStoreStats::requests),
                                                               counter("retries", &ObjectStoreStats::retries),
                                                               counter("bytes", &ObjectStoreStats::bytes)};
    return f;
  }
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

// What a HEAD tells: the size and the user metadata (x-amz-meta-NAME: value, NAME lower-case).
struct ObjectHead {
  uint64_t size = 0;
  std::map<std::string, std::string> metadata;
};

// Thread-safe: concurrent calls each take a connection of their own from a small pool.
// Errors are moerun::Error, ErrorKind::Io, one line naming the s3:// URL: "access denied" (403,
// with the server's code), "no such object" (404), or "unreachable after N attempts" with the last
// failure; a range beyond the object's end is BadInput (a truncated file).
class ObjectStore {
 public:
  explicit ObjectStore(S3Config config);
  ~ObjectStore();

  uint64_t size_of(const S3Url& url) const;  // HEAD
  std::optional<ObjectHead> head(const S3Url& url) const;  // nullopt when there is no such object
  // Uploads a local file as one object (one PUT, up to S3's 5 GiB), with user metadata. The body is
  // sent unsigned (UNSIGNED-PAYLOAD); a retry sends the file again from its start.
  void put_file(const S3Url& url, const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  void remove(const S3Url& url) const;  // DELETE; an object already gone is fine
  // Exactly `length` bytes from `offset` into dst (one ranged GET).
  void read(const S3Url& url, uint64_t offset, std::size_t length, void* dst) const;
  // The objects under url.key + "/" (one GET per 1000 keys).
  std::vector<ObjectInfo> list(const S3Url& prefix) const;

  std::string http_url(const S3Url& url) const;  // endpoint/bucket/key
  const S3Config& config() const { return config_; }
  ObjectStoreStats stats() const;

 private:
  struct Request;
  struct Response;
  Response perform(const Request& req) const;
  Response attempt(const Request& req) const;

  S3Config config_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<struct CurlConnection>> pool_;
  mutable std::atomic<uint64_t> requests_{0}, retries_{0}, bytes_{0};
};

}  // namespace moerun::io
