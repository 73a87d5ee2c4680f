// RAII handles and the check macro for libcurl's easy API. Nothing outside this file and curl.cpp
// calls curl_* functions directly; failures throw moerun::Error with the call and curl's message.
#pragma once
#include <curl/curl.h>

#include <string>
#include <utility>

#include "base/error.hpp"

namespace moerun::io {

[[noreturn]] void curl_fail(const char* call, CURLcode code, const char* file, int line);

#define CURL_CHECK(expr)                                                                                \
  do {                                                                                                  \
    const CURLcode moerun_curl_rc = (expr);                                                             \
    if (moerun_curl_rc != CURLE_OK) ::moerun::io::curl_fail(#expr, moerun_curl_rc, __FILE__, __LINE__); \
  } while (0)

// One easy handle (keeps its connection between requests). curl_global_init runs once, before the
// first handle, as libcurl requires.
class CurlEasy {
 public:
  CurlEasy();
  CurlEasy(const CurlEasy&) = delete;
  CurlEasy& operator=(const CurlEasy&) = delete;
  CurlEasy(CurlEasy&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ~CurlEasy();
  CURL* get() const { return h_; }

 private:
  CURL* h_ = nullptr;
};

// A header list for CURLOPT_HTTPHEADER.
class CurlHeaders {
 public:
  CurlHeaders() = default;
  CurlHeaders(const CurlHeaders&) = delete;
  CurlHeaders& operator=(const CurlHeaders&) = delete;
  ~CurlHeaders();
  void add(const std::string& header);
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

// Percent-encodes everything but unreserved characters (RFC 3986), as SigV4's canonical query wants.
std::string curl_escape(const std::string& s);

}  // namespace moerun::io
