// JSONL requests (validation with line numbers, defaults, --skip-invalid), result serialisation,
// the journal (resume after a torn line) and atomic writes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <set>

#include "base/error.hpp"
#include "tests/test_support.hpp"
#include "io/requests.hpp"
#include "io/output_file.hpp"
#include "io/result_journal.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class Requests : public ::testing::Test {
 protected:
  void SetUp() override { dir = moerun::testing::scratch_dir("req"); }
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
  // f() must fail with a usage error whose message contains `want`.
  static void usage(const std::function<void()>& f, const std::string& want) {
    try {
      f();
      ADD_FAILURE() << "no error, wanted " << want;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  fs::path dir;
};

TEST_F(Requests, DefaultsApply) {
  RequestDefaults d;
  d.max_new_tokens = 7;
  d.temperature = 0.5;
  d.seed = 3;
  auto rs = read_requests(
      write(
          "{\"id\":\"a\",\"prompt_tokens\":[1,2],\"seed\":9}\n\n{\"id\":\"b\",\"prompt_tokens\":[3],\"max_new_tokens\":2,\"temperature\":0}\n"),
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
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1,100]}").find("line 2: prompt_tokens[1] = 100 is out of range [0, 100)"),
            std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[]}").find("line 2: field prompt_tokens is empty"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"max_new_tokens\":-1}").find("line 2: field max_new_tokens is -1"),
            std::string::npos);
  EXPECT_NE(bad("{\"prompt_tokens\":[1]}").find("line 2: field id is missing"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"ok\",\"prompt_tokens\":[1]}").find("line 2: id \"ok\" repeats line 1"), std::string::npos);
  EXPECT_NE(bad("[1,2]").find("line 2: expected a JSON object"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"top_p\":0}").find("top_p"), std::string::npos);
}

TEST_F(Requests, SkipInvalidKeepsTheErrorAsAResult) {  // (ids: SkipInvalidKeepsRealIdsAndNeverRepeatsOne)
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

// A line moerun writes is one it reads back (issue 63): JSON has no NaN or Inf, nlohmann writes
// them as null, and null reads back as NaN instead of making the line unreadable; an error result
// (a request that met non-finite values) round-trips too.
TEST_F(Requests, ResultsWithNonFiniteLogprobsAndErrorsReadBack) {
  Result r{"q1", {5}, "length", 2, ""};
  r.has_logprobs = true;
  r.logprobs.push_back({5, std::nan(""), {{5, -INFINITY}, {3, -1.5}}});
  Result back;
  ASSERT_TRUE(result_from_json(result_to_json(r, true), &back));
  ASSERT_EQ(back.logprobs.size(), 1u);
  EXPECT_TRUE(std::isnan(back.logprobs[0].logprob));
  EXPECT_TRUE(std::isnan(back.logprobs[0].top[0].second));
  EXPECT_EQ(back.logprobs[0].top[1].second, -1.5);
  const Result failed{"q2", {}, "", 4, "non-finite values (NaN or Inf) from layer 3 at positions 0..3"};
  ASSERT_TRUE(result_from_json(result_to_json(failed, true), &back));
  EXPECT_EQ(back.error, failed.error);
}

TEST_F(Requests, JournalResumesAfterTornLine) {
  const std::string out = (dir / "out.jsonl").string();
  const JournalKeys keys{{"a", "ka"}, {"b", "kb"}, {"c", "kc"}};
  {
    ResultJournal j(out, 0, false, keys);
    j.append({"a", {1}, "length", 1, ""});
    j.append({"b", {2}, "length", 1, ""});
    j.sync();
  }
  { std::ofstream(out + ".journal", std::ios::app) << "{\"id\":\"c\",\"outp"; }  // killed mid-write
  {
    ResultJournal j(out, 0, true, keys);
    EXPECT_EQ(j.finished().size(), 2u);
    j.append({"c", {3}, "eos", 1, ""});
  }  // closed without an explicit sync: close() syncs
  ResultJournal j(out, 0, true, keys);
  EXPECT_EQ(j.finished().size(), 3u);
  EXPECT_EQ(j.finished().at("c").finish_reason, "eos");
  EXPECT_EQ(j.finished().at("c").key, "kc");
  // Without --resume the journal starts empty.
  ResultJournal fresh(out, 0, false, keys);
  EXPECT_TRUE(fresh.finished().empty());
}

// A journal written for other requests (same ids, other prompts), another model or other options
// carries other keys: its entries are not taken as this run's results.
TEST_F(Requests, JournalEntriesWithAnotherKeyAreNotFinished) {
  const std::string out = (dir / "out.jsonl").string();
  {
    const JournalKeys old_keys{{"a", "old-a"}, {"b", "kb"}};
    ResultJournal j(out, 0, false, old_keys);
    j.append({"a", {1}, "length", 1, ""});
    j.append({"b", {2}, "length", 1, ""});
  }
  { std::ofstream(out + ".journal", std::ios::app) << "{\"id\":\"c\",\"output_tokens\":[1],\"finish_reason\":\"eos\",\"prompt_len\":1}\n"; }
  const JournalKeys keys{{"a", "new-a"}, {"b", "kb"}, {"c", "kc"}};
  JournalReadStats st;
  const auto got = read_journals(out, keys, &st);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_TRUE(got.count("b"));
  EXPECT_EQ(st.stale, 2);  // "a" (other key) and "c" (no key: a journal from before keys)
  ResultJournal j(out, 0, true, keys);
  EXPECT_EQ(j.finished().size(), 1u);
  // The recomputed "a" is taken after the stale one, from the same file.
  j.append({"a", {9}, "eos", 1, ""});
  j.close();
  EXPECT_EQ(read_journals(out, keys).at("a").output_tokens, std::vector<int32_t>{9});
}

TEST_F(Requests, RequestFingerprintCoversPromptAndSampling) {
  auto rs = read_requests(
      write("{\"id\":\"a\",\"prompt_tokens\":[1,2]}\n{\"id\":\"b\",\"prompt_tokens\":[1,3]}\n"
            "{\"id\":\"c\",\"prompt_tokens\":[1,2],\"seed\":4}\n{\"id\":\"d\",\"prompt_tokens\":[1,2],\"max_new_tokens\":3}\n"),
      {}, {100, 64}, false);
  Request same = rs[0];
  EXPECT_EQ(request_fingerprint(same), request_fingerprint(rs[0]));
  same.id = "b";
  EXPECT_NE(request_fingerprint(same), request_fingerprint(rs[1]));  // same id, other prompt
  same = rs[0];
  same.id = "c";
  EXPECT_NE(request_fingerprint(same), request_fingerprint(rs[2]));  // other seed
  same.id = "d";
  EXPECT_NE(request_fingerprint(same), request_fingerprint(rs[3]));  // other budget
}

TEST_F(Requests, AtomicWriteLeavesNoTempFile) {
  const std::string out = (dir / "o.jsonl").string();
  write_file_atomically(out, {"a", "b"});
  write_file_atomically(out, {"c"});
  std::ifstream in(out);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(all, "c\n");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "o.jsonl");
  try {
    check_output_target((dir / "missing" / "x.jsonl").string(), "--output");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

// A stale or planted OUT.tmp (here a symlink to another file) is never written through.
TEST_F(Requests, AtomicWriteIgnoresAPlantedTempName) {
  const std::string out = (dir / "o.jsonl").string(), victim = (dir / "victim").string();
  std::ofstream(victim) << "keep\n";
  fs::create_symlink(victim, out + ".tmp");
  write_file_atomically(out, {"x"});
  std::ifstream in(victim);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(all, "keep\n");
}

// Devices, FIFOs and directories are refused as outputs (Usage). A symlink named as an output is
// refused; one planted at a name moerun writes is replaced by the new file, and the file it pointed
// at is left alone (issue 63: never written through).
TEST_F(Requests, OutputTargetsMustBeRegularFiles) {
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  usage([&] { check_output_target(fifo, "--output"); }, "--output " + fifo + ": is a FIFO");
  usage([&] { write_file_atomically(fifo, {"x"}); }, "is a FIFO");
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
  usage([&] { check_output_target(dir.string(), "--stats-json"); }, "is a directory");
  if (::geteuid() == 0) {  // mknod needs root; CI runs as root. A stand-in for /dev/null, in our temp dir.
    const std::string null = (dir / "null").string();
    ASSERT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0);
    usage([&] { check_output_target(null, "--trace"); }, "is a character device");
    usage([&] { write_file_atomically(null, {"x"}); }, "is a character device");
    EXPECT_EQ(fs::status(null).type(), fs::file_type::character);
  }
  const std::string real = (dir / "real.jsonl").string(), link = (dir / "link.jsonl").string();
  std::ofstream(real) << "old\n";
  fs::create_symlink("real.jsonl", link);
  usage([&] { check_output_target(link, "--output"); }, "--output " + link + ": is a symbolic link");
  write_file_atomically(link, {"new"});
  EXPECT_FALSE(fs::is_symlink(link));
  std::ifstream in(real), mine(link);
  std::string all((std::istreambuf_iterator<char>(in)), {}), written((std::istreambuf_iterator<char>(mine)), {});
  EXPECT_EQ(all, "old\n");
  EXPECT_EQ(written, "new\n");
  fs::create_symlink(fifo, dir / "link-to-fifo");
  usage([&] { check_output_target((dir / "link-to-fifo").string(), "--output"); }, "is a symbolic link");
}

TEST_F(Requests, OutputsMustNotBeInputsOrEachOther) {
  const std::string in = write("{}\n");
  usage([&] { check_distinct_paths({{in, "--input"}}, {{in, "--output"}}); }, "--output " + in + " is the --input file");
  // The same file under another spelling, and through a hard link.
  const std::string other = (dir / "." / "in.jsonl").string();
  usage([&] { check_distinct_paths({{in, "--input"}}, {{other, "--output"}}); }, "is the --input file");
  fs::create_hard_link(in, dir / "hard.jsonl");
  usage([&] { check_distinct_paths({{in, "--input"}}, {{(dir / "hard.jsonl").string(), "--output"}}); }, "is the --input file");
  // Outputs that do not exist yet compare by spelling.
  const std::string out = (dir / "out.jsonl").string();
  usage(
      [&] {
        check_distinct_paths({{in, "--input"}}, {{out, "--output"}, {out, "--stats-json"}});
      },
      "--stats-json and --output name the same file");
  // Side files: OUT.journal is written next to the output, TRACE.1 by router 1.
  usage([&] { check_distinct_paths({{out + ".journal", "--input"}}, {{out, "--output"}}); }, "would be overwritten by a side file");
  usage([&] { check_distinct_paths({{in, "--input"}}, {{out, "--output"}, {out + ".1", "--trace"}}); }, "name the same file");
  EXPECT_NO_THROW(check_distinct_paths({{in, "--input"}}, {{out, "--output"}, {out + ".stats", "--stats-json"}}));
}

TEST_F(Requests, SkipInvalidKeepsRealIdsAndNeverRepeatsOne) {
  // Line 2 is invalid but has its own id; line 3 repeats line 1's id; line 4 has no id and its
  // "line:4" is taken by line 5's real id; line 6 overflows a double.
  auto rs = read_requests(write("{\"id\":\"a\",\"prompt_tokens\":[1]}\n"
                                "{\"id\":\"b\",\"prompt_tokens\":[]}\n"
                                "{\"id\":\"a\",\"prompt_tokens\":[2]}\n"
                                "not json\n"
                                "{\"id\":\"line:4\",\"prompt_tokens\":[3]}\n"
                                "{\"id\":\"t\",\"prompt_tokens\":[1],\"temperature\":1e999}\n"),
                          {}, {100, 64}, true);
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].id, "a");
  EXPECT_TRUE(rs[0].error.empty());
  EXPECT_EQ(rs[1].id, "b");
  EXPECT_NE(rs[1].error.find("prompt_tokens is empty"), std::string::npos);
  EXPECT_EQ(rs[2].id, "line:3");
  EXPECT_NE(rs[2].error.find("id \"a\" repeats line 1"), std::string::npos);
  EXPECT_EQ(rs[3].id, "line:4#2");
  EXPECT_EQ(rs[4].id, "line:4");
  EXPECT_TRUE(rs[4].error.empty());
  EXPECT_EQ(rs[5].id, "line:6");  // not valid JSON at all: its id cannot be read
  EXPECT_NE(rs[5].error.find("not valid JSON"), std::string::npos);
  std::set<std::string> ids;
  for (const auto& r : rs) EXPECT_TRUE(ids.insert(r.id).second) << r.id;
}

TEST_F(Requests, NumbersBeyondTheirTypeNameTheLine) {
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"temperature\":1e999}").find("line 2: not valid JSON"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[18446744073709551615]}").find("prompt_tokens[0] = 18446744073709551615 is out of range"),
            std::string::npos);
  EXPECT_NE(
      bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"max_new_tokens\":18446744073709551615}").find("max_new_tokens is 18446744073709551615"),
      std::string::npos);
  // A budget near INT64_MAX is capped where generation stops anyway (max_position).
  auto rs = read_requests(write("{\"id\":\"x\",\"prompt_tokens\":[1,2],\"max_new_tokens\":9223372036854775807}\n"), {}, {100, 64}, false);
  EXPECT_EQ(rs[0].max_new_tokens, 62);
}

TEST_F(Requests, NulByteInALineIsRefused) {  // the JSON parser would stop there and drop the rest
  const std::string line = std::string("{\"id\":\"a\",\"prompt_tokens\":[1]}") + '\0' + "garbage";
  const std::string e = bad(line);
  EXPECT_NE(e.find("line 2: contains a NUL byte at column 31"), std::string::npos) << e;
}

TEST_F(Requests, DeepNestingAndDuplicateKeysAreRefusedInOneShortLine) {  // issue 46
  const std::string deep = "{\"id\":\"x\",\"prompt_tokens\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const std::string e = bad(deep);
  EXPECT_NE(e.find("line 2: not valid JSON: nested deeper than 64 levels"), std::string::npos) << e.substr(0, 200);
  EXPECT_LT(e.size(), 200u);
  const std::string d = bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"prompt_tokens\":[2]}");
  EXPECT_NE(d.find("line 2: not valid JSON: key \"prompt_tokens\" appears twice"), std::string::npos) << d;
  // A long malformed line is not quoted whole.
  const std::string l = bad("{\"id\":\"" + std::string(50000, 'a') + "\",\"prompt_tokens\":[1,}");
  EXPECT_NE(l.find("line 2: not valid JSON at byte"), std::string::npos) << l.substr(0, 200);
  EXPECT_LT(l.size(), 300u);
}

TEST_F(Requests, ScoringFieldsNullOrInConflictAreRefused) {  // issue 46: FORMATS.md's rule
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"logprobs\":null}").find("line 2: field logprobs is null"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"prompt_logprobs\":null}").find("line 2: field prompt_logprobs is null"),
            std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1],\"echo\":null}").find("line 2: field echo is not true or false"), std::string::npos);
  EXPECT_NE(bad("{\"id\":\"x\",\"prompt_tokens\":[1,2],\"echo\":true,\"logprobs\":2,\"prompt_logprobs\":5}")
                .find("fields echo and prompt_logprobs both ask"),
            std::string::npos);
  // echo alone takes logprobs' count; echo false leaves prompt_logprobs as given.
  auto rs = read_requests(write("{\"id\":\"a\",\"prompt_tokens\":[1,2],\"echo\":true,\"logprobs\":3}\n"
                                "{\"id\":\"b\",\"prompt_tokens\":[1,2],\"echo\":false,\"prompt_logprobs\":4}\n"),
                          {}, {100, 64}, false);
  EXPECT_EQ(rs[0].prompt_logprobs, 3);
  EXPECT_EQ(rs[1].prompt_logprobs, 4);
}

TEST_F(Requests, ParsedFromTextAsFromTheFile) {  // what every rank does with rank 0's bytes
  const std::string text = "{\"id\":\"a\",\"prompt_tokens\":[1,2]}\n\n{\"id\":\"b\",\"prompt_tokens\":[3]}";
  const auto from_file = read_requests(write(text), {}, {100, 64}, false);
  const auto from_text = parse_requests(read_requests_text(write(text)), "x.jsonl", {}, {100, 64}, false);
  ASSERT_EQ(from_text.size(), 2u);
  ASSERT_EQ(from_file.size(), from_text.size());
  for (std::size_t i = 0; i < from_text.size(); ++i) {
    EXPECT_EQ(from_text[i].id, from_file[i].id);
    EXPECT_EQ(from_text[i].prompt_tokens, from_file[i].prompt_tokens);
    EXPECT_EQ(from_text[i].line, from_file[i].line);
  }
  EXPECT_EQ(from_text[1].line, 3);
}

}  // namespace
}  // namespace moerun::io
