// The chat template renderer's bounds (issue 77): a template that asks for gigabytes, one that loops,
// one whose output outgrows what max_position tokens can hold, and one that does not compile are each
// their own conversation's error, within seconds, and the next conversation renders as usual with the
// same renderer. A named template that does not compile fails only the lines that name it, its error
// naming tokenizer_config.json's chat_template; a Python without jinja2 is a usage error saying what
// to install. Runs the real helper under MOERUN_PYTHON (the test venv, which has jinja2).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "io/chat_template.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

std::string python() {
  const char* p = std::getenv("MOERUN_PYTHON");
  return p && *p ? p : "python3";
}

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = moerun::testing::scratch_dir("chat-template");
    // A default template and a named one that does not compile (an unclosed for).
    const nlohmann::json cfg{
        {"bos_token", "<s>"},
        {"chat_template",
         {{{"name", "default"}, {"template", "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"}},
          {{"name", "broken"}, {"template", "{% for m in messages %}{{ m.content }}"}}}}};
    std::ofstream(dir_ / "tokenizer_config.json") << cfg.dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The conversations' results, each a one-message chat with template `t` ("" the default).
  std::vector<RenderedChat> render(ChatTemplateRenderer& r, const std::vector<std::string>& templates, int64_t max_bytes = 1 << 20) {
    static const std::string messages = R"([{"role": "user", "content": "hi"}])", kwargs = "{}";
    std::vector<ChatTemplateRenderer::Conversation> c;
    for (const std::string& t : templates) c.push_back({&messages, &kwargs, &t});
    return r.render(c, max_bytes);
  }
  ChatTemplateRenderer renderer(double seconds, int64_t memory) {
    return ChatTemplateRenderer((dir_ / "tokenizer.json").string(), python(), {seconds, memory});
  }
  fs::path dir_;
};

TEST_F(ChatTemplateTest, DefaultTemplateRenders) {
  auto r = renderer(5, int64_t{512} << 20);
  const auto got = render(r, {""});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].error, "");
  EXPECT_EQ(got[0].text, "<s>[user] hi");
}

TEST_F(ChatTemplateTest, MemoryBombIsItsOwnErrorAndTheNextLineRenders) {
  auto r = renderer(10, int64_t{512} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = render(r, {"{{ 'x' * 3000000000 }}", ""});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].error.find("memory"), std::string::npos) << got[0].error;
  EXPECT_EQ(got[1].error, "");
  EXPECT_EQ(got[1].text, "<s>[user] hi");
  EXPECT_LT(s, 10) << "refused at the memory limit, not after the time limit";
}

TEST_F(ChatTemplateTest, LoopStopsAtTheTimeLimitAndTheNextLineRenders) {
  auto r = renderer(1, int64_t{512} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = render(r, {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x", ""});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(got[0].error.find("took longer"), std::string::npos) << got[0].error;
  EXPECT_EQ(got[1].text, "<s>[user] hi");
  EXPECT_LT(s, 4) << "1 s limit, 2 s grace";
}

TEST_F(ChatTemplateTest, OutputPastTheBoundStopsThere) {
  auto r = renderer(5, int64_t{512} << 20);
  const auto got = render(r, {"{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", ""}, 10000);
  EXPECT_NE(got[0].error.find("rendered more than 10000 bytes"), std::string::npos) << got[0].error;
  EXPECT_EQ(got[1].text, "<s>[user] hi");
}

TEST_F(ChatTemplateTest, TemplateThatDoesNotCompileFailsOnlyTheLinesThatUseIt) {
  auto r = renderer(5, int64_t{512} << 20);
  const auto got = render(r, {"broken", "", "{% if %}", ""});
  EXPECT_NE(got[0].error.find("tokenizer_config.json's chat_template named 'broken' does not compile"), std::string::npos) << got[0].error;
  EXPECT_EQ(got[1].text, "<s>[user] hi");
  EXPECT_NE(got[2].error.find("body.chat_template does not compile"), std::string::npos) << got[2].error;
  EXPECT_EQ(got[3].text, "<s>[user] hi");
  EXPECT_EQ(r.restarts(), 0) << "a compile error is an answer, not an overrun";
}

TEST_F(ChatTemplateTest, PythonWithoutJinja2IsAUsageErrorSayingWhatToInstall) {
  // -S: no site-packages, so no jinja2 (the interpreter itself runs).
  const fs::path wrapper = dir_ / "python-no-site";
  std::ofstream(wrapper) << "#!/bin/sh\nexec " << python() << " -S \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  ChatTemplateRenderer r((dir_ / "tokenizer.json").string(), wrapper.string(), {5, int64_t{512} << 20});
  const std::string msg = moerun::testing::error_of([&] { render(r, {""}); }, ErrorKind::Usage);
  EXPECT_NE(msg.find("pip install jinja2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace moerun::io
