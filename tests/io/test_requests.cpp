// JSONL requests (validation with line numbers, defaults, --skip-invalid), result serialisation,
// the journal (resume after a torn line) and atomic writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "io/requests.hpp"
#include "io/result_journal.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class Requests : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("moerun-req-" + std::to_string(::getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string write(const std::string& text) {
    const std::string p = (dir / "in.jsonl").string();
    std::ofstream(p) << text;
    return p;
  }
  std::string bad(const std::string& line) {
    try {
      read_requests(write("{\"id\":\"ok\",\"prompt_tokens\":[1]}\n" + line + "\n"), {}, {100, 64}, false);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      return e.what();
    }
    ADD_FAILURE() << "no error for " << line;
    return "";
  }
  fs::path dir;
};

TEST_F(Requests, DefaultsApply) {
  RequestDefaults d;
  d.max_new_tokens = 7;
  d.temperature = 0.5;
  d.seed = 3;
  auto rs = read_requests(write("{\"id\":\"a\",\"prompt_tokens\":[1,2],\"seed\":9}\n\n{\"id\":\"b\",\"prompt_tokens\":[3],\"max_new_tokens\":2,\"temperature\":0}\n"),
                          d, {100, 64}, false);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].max_new_tokens, 7);
  EXPECT_EQ(rs[0].temperature, 0.5);
  EXPECT_EQ(rs[0].seed, 9u);
  EXPECT_EQ(rs[1].max_new_tokens, 2);
  EXPECT_EQ(rs[1].temperature, 0.0);
  EXPECT_EQ(rs[1].line, 3);
}

TEST_F(Requests, EachBadLineNamesItsLineAndField) {
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1,2").find("line 2: not valid JSON"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1,100]}").find("line 2: prompt_tokens[1] = 100 is out of range [0, 100)"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[]}").find("line 2: field prompt_tokens is empty"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"max_new_tokens\":-1}").find("line 2: field max_new_tokens is -1"), std::string::npos);
  EXPECT_NE(bad("{\"prompt_tokens\":[1]}").find("line 2: field id is missing"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"ok\",\"prompt_tokens\":[1]}").find("line 2: id \"ok\" repeats line 1"), std::string::npos);
  EXPECT_NE(bad("[1,2]").find("line 2: expected a JSON object"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"top_p\":0}").find("top_p"), std::string::npos);
}

TEST_F(Requests, SkipInvalidKeepsTheErrorAsAResult) {
  auto rs = read_requests(write("{\"id\":\"a\",\"prompt_tokens\":[1]}\nnot json\n"), {}, {100, 64}, true);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_TRUE(rs[0].error.empty());
  EXPECT_EQ(rs[1].id, "line:2");
  EXPECT_NE(rs[1].error.find("not valid JSON"), std::string::npos);
}

TEST_F(Requests, MissingFileIsIo) {
  try {
    read_requests((dir / "nope.jsonl").string(), {}, {100, 64}, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

TEST_F(Requests, ResultJsonRoundTrip) {
  Result r{"q1", {5, 6, 2}, "eos", 3, ""};
  Result back;
  ASSERT_TRUE(result_from_json(result_to_json(r), &back));
  EXPECT_EQ(back.output_tokens, r.output_tokens);
  EXPECT_EQ(back.finish_reason, "eos");
  EXPECT_EQ(back.prompt_len, 3);
  EXPECT_FALSE(result_from_json("{\"id\":\"q1\",\"output_tok", &back));
}

TEST_F(Requests, JournalResumesAfterTornLine) {
  const std::string out = (dir / "out.jsonl").string();
  {
    ResultJournal j(out, 0, false);
    j.append({"a", {1}, "length", 1, ""});
    j.append({"b", {2}, "length", 1, ""});
  }
  { std::ofstream(out + ".journal", std::ios::app) << "{\"id\":\"c\",\"outp"; }  // killed mid-write
  {
    ResultJournal j(out, 0, true);
    EXPECT_EQ(j.finished().size(), 2u);
    j.append({"c", {3}, "eos", 1, ""});
  }
  ResultJournal j(out, 0, true);
  EXPECT_EQ(j.finished().size(), 3u);
  EXPECT_EQ(j.finished().at("c").finish_reason, "eos");
  // Without --resume the journal starts empty.
  ResultJournal fresh(out, 0, false);
  EXPECT_TRUE(fresh.finished().empty());
}

TEST_F(Requests, AtomicWriteLeavesNoTempFile) {
  const std::string out = (dir / "o.jsonl").string();
  write_file_atomically(out, {"a", "b"});
  std::ifstream in(out);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(all, "a\nb\n");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  try {
    check_writable((dir / "missing" / "x.jsonl").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

}  // namespace
}  // namespace moerun::io
