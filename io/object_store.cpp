// S3 client: request, classification of failures, retry loop.
#include "io/object_store.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <random>
#include <regex>
#include <thread>

#include "base/error.hpp"
#include "base/log.hpp"
#include "io/curl.hpp"

namespace moerun::io {

struct CurlConnection {
  CurlEasy easy;
};

namespace {

// SHA-256 of an empty body: GET and HEAD sign it as their payload hash.
constexpr const char* kEmptyPayloadSha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Where a response body goes: a caller's buffer (a ranged read) or a string (listings, errors).
struct Sink {
  char* dst = nullptr;
  std::size_t capacity = 0;  // bytes dst can take
  std::size_t skip = 0;  // bytes to drop first (a server that ignored Range sent the whole object)
  std::size_t written = 0;
  std::string text;  // used when dst is null, and for error bodies (first 4 KiB)
  long status = 0;  // from the status line, known before the body arrives
  std::map<std::string, std::string> metadata;  // x-amz-meta-* response headers
};

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const std::size_t bytes = size * n;
  if (bytes > 9 && std::strncmp(data, "HTTP/", 5) == 0) {
    const char* sp = static_cast<const char*>(std::memchr(data, ' ', bytes));
    if (sp) s->status = std::strtol(sp + 1, nullptr, 10);
    s->metadata.clear();  // a new response (after a redirect or 100-continue)
    return bytes;
  }
  std::string line(data, bytes);
  const std::string meta = "x-amz-meta-";
  const auto colon = line.find(':');
  if (colon != std::string::npos && colon > meta.size()) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.compare(0, meta.size(), meta) == 0) {
      std::string value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
      s->metadata[name.substr(meta.size())] = value;
    }
  }
  return bytes;
}

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  std::size_t bytes = size * n, off = 0;
  if (s->skip > 0) {
    off = std::min(s->skip, bytes);
    s->skip -= off;
  }
  if (s->dst && s->status / 100 == 2) {
    const std::size_t take = std::min(bytes - off, s->capacity - s->written);
    std::memcpy(s->dst + s->written, data + off, take);
    s->written += take;
    if (take < bytes - off) return 0;  // more than the range asked for: abort (CURLE_WRITE_ERROR)
  } else if (s->dst) {
    if (s->text.size() < 4096) s->text.append(data + off, std::min<std::size_t>(bytes - off, 4096));
  } else {
    s->text.append(data + off, bytes - off);
    s->written += bytes - off;
  }
  return bytes;
}

std::string xml_field(const std::string& body, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const auto a = body.find(open);
  if (a == std::string::npos) return {};
  const auto b = body.find(close, a);
  return b == std::string::npos ? std::string{} : body.substr(a + open.size(), b - a - open.size());
}

// A request that got no HTTP answer (connection refused, reset, timeout): the retry loop decides.
struct TransportError {
  CURLcode code;
};

bool transient(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return true;
    default: return false;
  }
}

double jittered(double delay) {
  // Half fixed, half uniform ("equal jitter"): the delay still grows, but ranks that failed together
  // do not retry together.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return delay / 2 + std::uniform_real_distribution<double>(0, delay / 2)(rng);
}

}  // namespace

std::string S3Config::endpoint_url() const {
  std::string e = endpoint.empty() ? "https://s3." + region + ".amazonaws.com" : endpoint;
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

bool is_s3_url(const std::string& s) {
  return s.rfind("s3://", 0) == 0;
}

S3Url parse_s3_url(const std::string& s) {
  if (!is_s3_url(s)) fail(ErrorKind::Usage, s, ": not an s3:// URL");
  std::string rest = s.substr(5);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const auto slash = rest.find('/');
  S3Url u{rest.substr(0, slash), slash == std::string::npos ? "" : rest.substr(slash + 1)};
  static const std::regex bucket(R"([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])");
  if (!std::regex_match(u.bucket, bucket))
    fail(ErrorKind::Usage, s, ": bucket name \"", u.bucket, "\" is not valid (3-63 characters: a-z 0-9 . -)");
  // Every segment of the key non-empty and not . or .. (s3://bkt//x has an empty first one).
  if (slash != std::string::npos) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t end = u.key.find('/', start);
      const std::string seg = u.key.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (seg.empty() || seg == "." || seg == "..") fail(ErrorKind::Usage, s, ": empty, . or .. path segment");
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return u;
}

struct ObjectStore::Request {
  enum class Method { Head, Get, Put, Delete } method = Method::Get;
  std::string upload;  // Put: the local file sent as the body
  std::map<std::string, std::string> metadata;  // Put: x-amz-meta-* headers
  bool allow_404 = false;  // a 404 is an answer (head()), not an error
  S3Url url;
  std::string query;  // canonical (sorted, escaped), without '?'
  uint64_t offset = 0;
  std::size_t length = 0;  // 0: whole body
  char* dst = nullptr;  // null: body into Response::text
};

struct ObjectStore::Response {
  long status = 0;
  std::string text;
  uint64_t content_length = 0;
  std::map<std::string, std::string> metadata;
};

ObjectStore::ObjectStore(S3Config config) : config_(std::move(config)) {
  if (config_.access_key_id.empty() || config_.secret_access_key.empty())
    fail(ErrorKind::Usage, "s3:// needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  if (config_.retries < 0) fail(ErrorKind::Usage, "--s3-retries must be >= 0");
  const std::string e = config_.endpoint_url();
  if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0)
    fail(ErrorKind::Usage, "AWS_ENDPOINT_URL \"", e, "\" must start with http:// or https://");
}

ObjectStore::~ObjectStore() = default;

std::string ObjectStore::http_url(const S3Url& url) const {
  std::string path = url.bucket;
  if (!url.key.empty()) {
    // Escape each segment but keep the '/' separators (SigV4 canonical URI of S3).
    std::size_t start = 0;
    while (start <= url.key.size()) {
      const auto end = std::min(url.key.find('/', start), url.key.size());
      path += "/" + curl_escape(url.key.substr(start, end - start));
      start = end + 1;
    }
  }
  return config_.endpoint_url() + "/" + path;
}

ObjectStoreStats ObjectStore::stats() const {
  return {static_cast<int64_t>(requests_.load()), static_cast<int64_t>(retries_.load()), static_cast<int64_t>(bytes_.load())};
}

ObjectStore::Response ObjectStore::attempt(const Request& req) const {
  std::unique_ptr<CurlConnection> conn;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pool_.empty()) {
      conn = std::move(pool_.back());
      pool_.pop_back();
    }
  }
  if (!conn) conn = std::make_unique<CurlConnection>();
  CURL* h = conn->easy.get();
  curl_easy_reset(h);  // keeps the connection cache, drops the previous request's options

  const std::string url = http_url(req.url) + (req.query.empty() ? "" : "?" + req.query);
  const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  CurlHeaders headers;
  // An upload's body is not hashed into the signature (it can be GiBs); S3 allows that explicitly.
  headers.add(std::string("x-amz-content-sha256: ") + (req.method == Request::Method::Put ? "UNSIGNED-PAYLOAD" : kEmptyPayloadSha256));
  for (const auto& [k, v] : req.metadata) headers.add("x-amz-meta-" + k + ": " + v);
  if (!config_.session_token.empty()) headers.add("x-amz-security-token: " + config_.session_token);
  std::string range;
  if (req.length > 0) range = std::to_string(req.offset) + "-" + std::to_string(req.offset + req.length - 1);

  Sink sink;
  sink.dst = req.dst;
  sink.capacity = req.length;
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_URL, url.c_str()));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str()));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_USERNAME, config_.access_key_id.c_str()));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_PASSWORD, config_.secret_access_key.c_str()));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get()));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L));  // I/O threads: no SIGALRM for timeouts
  // Rounded up: libcurl takes 0 ms as no timeout at all.
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, std::max(1L, static_cast<long>(std::ceil(config_.timeout_s * 1000)))));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.connect_timeout_s * 1000)));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header));
  CURL_CHECK(curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink));
  if (req.method == Request::Method::Head) CURL_CHECK(curl_easy_setopt(h, CURLOPT_NOBODY, 1L));
  if (req.method == Request::Method::Delete) CURL_CHECK(curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE"));
  std::unique_ptr<FILE, int (*)(FILE*)> body(nullptr, &std::fclose);
  if (req.method == Request::Method::Put) {
    body.reset(std::fopen(req.upload.c_str(), "rb"));  // per attempt: a retry starts from byte 0
    if (!body) fail(ErrorKind::Io, req.upload, ": cannot open for upload: ", std::strerror(errno));
    std::fseek(body.get(), 0, SEEK_END);
    const long size = std::ftell(body.get());
    std::rewind(body.get());
    CURL_CHECK(curl_easy_setopt(h, CURLOPT_UPLOAD, 1L));
    CURL_CHECK(curl_easy_setopt(h, CURLOPT_READDATA, body.get()));
    CURL_CHECK(curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size)));
  }
  if (!range.empty()) CURL_CHECK(curl_easy_setopt(h, CURLOPT_RANGE, range.c_str()));

  requests_.fetch_add(1);
  const CURLcode rc = curl_easy_perform(h);
  Response r;
  if (rc != CURLE_OK) {
    // Not a response (or a write abort): the retry loop decides from the code. The connection is dropped.
    if (rc == CURLE_WRITE_ERROR) fail(ErrorKind::Io, req.url.str(), ": the server sent more bytes than the range asked for");
    throw TransportError{rc};
  }
  CURL_CHECK(curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status));
  curl_off_t cl = -1;
  CURL_CHECK(curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl));
  r.content_length = cl < 0 ? 0 : static_cast<uint64_t>(cl);
  bytes_.fetch_add(sink.written);
  r.text = std::move(sink.text);
  r.metadata = std::move(sink.metadata);
  if (req.dst && r.status / 100 == 2) {
    if (r.status == 200 && req.offset > 0) {
      r.status = 0;  // not a ranged answer: reported, not retried
      r.text = "<Code>the server ignored the Range header</Code>";
    } else if (sink.written != req.length) {
      r.status = 416;  // fewer bytes than asked: the object is shorter than the range
    }
  }
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    pool_.push_back(std::move(conn));
  }
  return r;
}

ObjectStore::Response ObjectStore::perform(const Request& req) const {
  const std::string name = req.url.str();
  double delay = config_.backoff_s;
  std::string last;
  for (int tries = 0;; ++tries) {
    try {
      Response r = attempt(req);
      if (r.status / 100 == 2 || (r.status == 404 && req.allow_404)) return r;
      if (r.status / 100 == 4 && r.text.empty() && req.method == Request::Method::Head) {
        // A HEAD answer has no body to say why; one byte's GET carries the server's error code.
        Request probe;
        probe.url = req.url;
        probe.length = 1;
        r.text = attempt(probe).text;
      }
      const std::string code = xml_field(r.text, "Code");
      const std::string detail = code.empty() ? "" : " " + code;
      if (r.status == 403 || r.status == 401)
        fail(ErrorKind::Io, name, ": access denied by the object store (HTTP ", r.status, detail,
             "); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION");
      if (r.status == 404) fail(ErrorKind::Io, name, ": no such object (HTTP 404", detail, ")");
      if (r.status == 416)
        fail(ErrorKind::BadInput, name, ": bytes ", req.offset, "..", req.offset + req.length,
             " are past the object's end (truncated file?)");
      if (r.status / 100 != 5 && r.status != 429) fail(ErrorKind::Io, name, ": HTTP ", r.status, detail);
      last = "HTTP " + std::to_string(r.status) + detail;
    } catch (const TransportError& e) {
      if (!transient(e.code)) fail(ErrorKind::Io, name, ": ", config_.endpoint_url(), ": ", curl_easy_strerror(e.code));
      last = curl_easy_strerror(e.code);
    }
    if (tries >= config_.retries)
      fail(ErrorKind::Io, name, ": object store at ", config_.endpoint_url(), " unreachable after ", tries + 1, " attempts (last: ", last,
           "; --s3-retries ", config_.retries, ")");
    const double wait = jittered(std::min(delay, config_.max_backoff_s));
    log::warn(name, ": ", last, "; retry ", tries + 1, "/", config_.retries, " in ", static_cast<int>(wait * 1000), " ms");
    retries_.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    delay *= 2;
  }
}

uint64_t ObjectStore::size_of(const S3Url& url) const {
  Request req;
  req.method = Request::Method::Head;
  req.url = url;
  return perform(req).content_length;
}

std::optional<ObjectHead> ObjectStore::head(const S3Url& url) const {
  Request req;
  req.method = Request::Method::Head;
  req.url = url;
  req.allow_404 = true;
  const Response r = perform(req);
  if (r.status == 404) return std::nullopt;
  return ObjectHead{r.content_length, r.metadata};
}

void ObjectStore::put_file(const S3Url& url, const std::string& path, const std::map<std::string, std::string>& metadata) const {
  Request req;
  req.method = Request::Method::Put;
  req.url = url;
  req.upload = path;
  req.metadata = metadata;
  perform(req);
}

void ObjectStore::remove(const S3Url& url) const {
  Request req;
  req.method = Request::Method::Delete;
  req.url = url;
  req.allow_404 = true;  // already gone
  perform(req);
}

void ObjectStore::read(const S3Url& url, uint64_t offset, std::size_t length, void* dst) const {
  if (length == 0) return;
  Request req;
  req.url = url;
  req.offset = offset;
  req.length = length;
  req.dst = static_cast<char*>(dst);
  perform(req);
}

std::vector<ObjectInfo> ObjectStore::list(const S3Url& prefix) const {
  std::vector<ObjectInfo> out;
  std::string token;
  std::set<std::string> seen;
  const std::string key_prefix = prefix.key.empty() ? "" : prefix.key + "/";
  do {
    Request req;
    req.url = {prefix.bucket, ""};
    // Parameters in sorted order, escaped: the SigV4 canonical query string.
    req.query = (token.empty() ? "" : "continuation-token=" + curl_escape(token) + "&") + "list-type=2&prefix=" + curl_escape(key_prefix);
    const Response r = perform(req);
    std::size_t pos = 0;
    while ((pos = r.text.find("<Contents>", pos)) != std::string::npos) {
      const auto end = r.text.find("</Contents>", pos);
      const std::string item = r.text.substr(pos, end - pos);
      const std::string size = xml_field(item, "Size");
      out.push_back({xml_field(item, "Key"), size.empty() ? 0 : std::strtoull(size.c_str(), nullptr, 10)});
      pos = end;
    }
    token = xml_field(r.text, "IsTruncated") == "true" ? xml_field(r.text, "NextContinuationToken") : "";
    // A store that hands out the same token again (or none while truncated) would list forever.
    if (!token.empty() && !seen.insert(token).second)
      fail(ErrorKind::Io, prefix.str(), ": the object store's listing repeats its continuation token after ", seen.size(),
           " page(s); it would never end (", config_.endpoint_url(), ")");
    if (token.empty() && xml_field(r.text, "IsTruncated") == "true")
      fail(ErrorKind::Io, prefix.str(), ": the object store's listing says it is truncated but gives no continuation token (",
           config_.endpoint_url(), ")");
  } while (!token.empty());
  return out;
}

}  // namespace moerun::io
