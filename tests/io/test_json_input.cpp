// io::parse_json, the one JSON reader of input files: depth limit, duplicate keys, short errors.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "io/json_input.hpp"

namespace moerun::io {
namespace {

std::string error_of(const std::string& text, const std::string& source = "f.json") {
  try {
    parse_json(text, source);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "no error for " << text.substr(0, 80);
  return "";
}

TEST(JsonInput, NestingUpToTheLimitParses) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + "1" + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(parse_json(ok, "f").dump().size(), ok.size());
  // Brackets inside strings do not count.
  EXPECT_TRUE(parse_json("[\"" + std::string(1000, '[') + "\"]", "f").is_array());
}

TEST(JsonInput, DeeperNestingIsOneShortError) {
  for (const int depth : {kMaxJsonDepth + 1, 100000, 1000000}) {
    const std::string e = error_of(std::string(depth, '[') + std::string(depth, ']'));
    EXPECT_EQ(e, "f.json: not valid JSON: nested deeper than 64 levels at byte 64");
  }
  EXPECT_NE(error_of("{\"a\":" + std::string(70, '{')).find("nested deeper than 64 levels at byte 68"), std::string::npos);
}

TEST(JsonInput, DuplicateKeysAreRefusedAtAnyDepth) {
  EXPECT_EQ(error_of("{\"0\": 1, \"1\": 2, \"0\": 3}"), "f.json: not valid JSON: key \"0\" appears twice in one object");
  EXPECT_NE(error_of("{\"a\": {\"b\": 1, \"b\": 1}}").find("key \"b\" appears twice"), std::string::npos);
  // The same key in two objects is fine.
  EXPECT_EQ(parse_json("[{\"a\": 1}, {\"a\": 2}]", "f").size(), 2u);
}

TEST(JsonInput, SyntaxErrorsNameTheByteAndQuoteLittle) {
  const std::string long_line = "[\"" + std::string(60000, 'x') + "\", }";
  const std::string e = error_of(long_line);
  EXPECT_EQ(e.rfind("f.json: not valid JSON at byte ", 0), 0u) << e.substr(0, 200);
  EXPECT_LT(e.size(), 200u);
  EXPECT_NE(error_of("{\"t\": 1e999}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(std::string("[1]\0[2]", 7)).find("a NUL byte at byte 3"), std::string::npos);
  // No source: no prefix (request lines add the file and line themselves).
  EXPECT_EQ(error_of("[", "").rfind("not valid JSON at byte 2", 0), 0u);
}

TEST(JsonInput, ExcerptIsCut) {
  EXPECT_EQ(json_excerpt(nlohmann::json("abc")), "\"abc\"");
  const std::string cut = json_excerpt(nlohmann::json(std::string(1000, 'a')));
  EXPECT_EQ(cut.size(), 40u);
  EXPECT_EQ(cut.substr(37), "...");
}

}  // namespace
}  // namespace moerun::io
