// libcurl wrappers.
#include "io/curl.hpp"

#include <mutex>

namespace moerun::io {

void curl_fail(const char* call, CURLcode code, const char* file, int line) {
  fail(ErrorKind::Internal, call, " failed (", file, ":", line, "): ", curl_easy_strerror(code));
}

CurlEasy::CurlEasy() {
  static std::once_flag once;
  std::call_once(once, [] { CURL_CHECK(curl_global_init(CURL_GLOBAL_DEFAULT)); });
  h_ = curl_easy_init();
  if (!h_) fail(ErrorKind::Internal, "curl_easy_init failed");
}

CurlEasy::~CurlEasy() {
  if (h_) curl_easy_cleanup(h_);
}

CurlHeaders::~CurlHeaders() {
  curl_slist_free_all(list_);
}

void CurlHeaders::add(const std::string& header) {
  curl_slist* next = curl_slist_append(list_, header.c_str());
  if (!next) fail(ErrorKind::Internal, "curl_slist_append failed");
  list_ = next;
}

std::string curl_escape(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

}  // namespace moerun::io
