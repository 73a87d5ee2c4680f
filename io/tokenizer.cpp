// Tokenizers: SentencePiece in process, `tokenizers` through the Python helper.
#include "io/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "io/chat_template.hpp"
#include "io/child_process.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"
#include "io/tokenizer_helper_source.hpp"  // kTokenizerHelperSource, generated from tokenizer_helper.py

namespace moerun::io {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& model, bool add_bos) : path_(model), add_bos_(add_bos) {
    const auto st = sp_.Load(model);
    if (!st.ok()) fail(ErrorKind::BadInput, model, ": not a SentencePiece model: ", st.ToString());
  }
  std::vector<std::vector<int32_t>> encode(const std::vector<std::string>& texts) override {
    std::vector<std::vector<int32_t>> out;
    for (const auto& t : texts) {
      std::vector<int> ids;
      const auto st = sp_.Encode(t, &ids);
      if (!st.ok()) fail(ErrorKind::BadInput, path_, ": cannot encode: ", st.ToString());
      std::vector<int32_t> v;
      if (add_bos_ && sp_.bos_id() >= 0) v.push_back(sp_.bos_id());
      v.insert(v.end(), ids.begin(), ids.end());
      out.push_back(std::move(v));
    }
    return out;
  }
  std::vector<std::string> decode(const std::vector<std::vector<int32_t>>& ids) override {
    std::vector<std::string> out;
    for (const auto& v : ids) {
      std::vector<int> in;
      for (int32_t id : v)  // ids beyond the tokenizer's vocabulary (a larger model vocab) are skipped
        if (id >= 0 && id < sp_.GetPieceSize()) in.push_back(id);
      std::string text;
      const auto st = sp_.Decode(in, &text);
      if (!st.ok()) fail(ErrorKind::BadInput, path_, ": cannot decode: ", st.ToString());
      out.push_back(std::move(text));
    }
    return out;
  }
  std::string describe() const override { return "sentencepiece " + path_; }
  // A piece's text with its word boundary as a space, a byte piece (<0xNN>) as that byte, control
  // pieces (BOS, EOS) as nothing: as Decode joins them.
  std::vector<std::string> token_bytes() override {
    std::vector<std::string> out(static_cast<std::size_t>(sp_.GetPieceSize()));
    for (int i = 0; i < sp_.GetPieceSize(); ++i) {
      if (sp_.IsControl(i) || sp_.IsUnknown(i)) continue;
      const std::string p = sp_.IdToPiece(i);
      if (sp_.IsByte(i)) {
        out[static_cast<std::size_t>(i)] = std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
        continue;
      }
      std::string t;
      for (std::size_t k = 0; k < p.size(); ++k) {
        if (p.compare(k, 3, "\xe2\x96\x81") == 0) {  // U+2581, SentencePiece's space
          t += ' ';
          k += 2;
        } else {
          t += p[k];
        }
      }
      out[static_cast<std::size_t>(i)] = t;
    }
    return out;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
  std::string path_;
  bool add_bos_;
};

[[noreturn]] void helper_did_not_start(const std::string& json_path, const TokenizerConfig& cfg, const Error& e) {
  fail(ErrorKind::Usage, json_path, ": the tokenizer helper did not start with ", cfg.python, " (", e.what(),
       "); tokenizer.json needs Python with the tokenizers package: pip install tokenizers, and MOERUN_PYTHON=that python");
}

// -I (isolated): no working directory or script directory on sys.path, no user site, no PYTHON*
// variables, so a json.py or tokenizers.py where the command runs is never imported.
ChildProcess start_helper(const std::string& json_path, const TokenizerConfig& cfg) {
  try {
    return ChildProcess({cfg.python, "-I", "-c", kTokenizerHelperSource, json_path}, true, true);
  } catch (const Error& e) {
    helper_did_not_start(json_path, cfg, e);  // an interpreter that is not there or cannot run
  }
}

class PythonTokenizer : public Tokenizer {
 public:
  PythonTokenizer(const std::string& json_path, const TokenizerConfig& cfg)
      : path_(json_path), cfg_(cfg), child_(start_helper(json_path, cfg)) {
    std::string first;
    try {
      first = child_.read_line(cfg.timeout_s, json_path);
    } catch (const Error& e) {
      helper_did_not_start(json_path, cfg, e);
    }
    const json j = json::parse(first, nullptr, false);
    if (j.is_object() && j.contains("missing"))
      fail(ErrorKind::Usage, json_path, ": ", cfg.python, " has no tokenizers package (", j["error"].get<std::string>(),
           "); tokenizer.json needs it: pip install tokenizers, and MOERUN_PYTHON=that python");
    if (j.is_discarded() || !j.is_object() || j.contains("error"))
      fail(ErrorKind::BadInput, json_path,
           ": the tokenizers library cannot load it: ", j.is_object() && j.contains("error") ? j["error"].dump() : first);
  }
  std::vector<std::vector<int32_t>> encode(const std::vector<std::string>& texts) override {
    const json r = call({{"op", "encode"}, {"texts", texts}});
    return r.at("ids").get<std::vector<std::vector<int32_t>>>();
  }
  std::vector<std::string> decode(const std::vector<std::vector<int32_t>>& ids) override {
    const json r = call({{"op", "decode"}, {"ids", ids}});
    return r.at("texts").get<std::vector<std::string>>();
  }
  std::string describe() const override { return "tokenizers " + path_; }
  std::vector<std::string> token_bytes() override {
    const json r = call({{"op", "token_bytes"}});
    std::vector<std::string> out;
    for (const json& h : r.at("bytes")) {
      const std::string hex = h.get<std::string>();
      std::string b(hex.size() / 2, '\0');
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      out.push_back(std::move(b));
    }
    return out;
  }
  // Rendered in the template helper (bounded, io/chat_template.hpp), then encoded here without
  // special tokens added, as apply_chat_template(tokenize=True) does. A text longer than max_tokens
  // tokens of the longest token could hold (twice that, for normalizers that drop characters) is
  // refused before it is encoded.
  std::vector<ChatTokens> encode_chat(const std::vector<ChatPrompt>& prompts, int64_t max_tokens) override {
    if (!renderer_) renderer_ = std::make_unique<ChatTemplateRenderer>(path_, cfg_.python, cfg_.templates);
    if (max_token_bytes_ == 0) max_token_bytes_ = call({{"op", "max_token_bytes"}}).at("bytes").get<int64_t>();
    std::vector<ChatTemplateRenderer::Conversation> convs;
    for (const ChatPrompt& p : prompts) convs.push_back({&p.messages, &p.template_kwargs, &p.chat_template});
    const int64_t max_bytes = 2 * std::max<int64_t>(max_tokens, 1) * std::max<int64_t>(max_token_bytes_, 1);
    const std::vector<RenderedChat> rendered = renderer_->render(convs, max_bytes);
    std::vector<ChatTokens> out(prompts.size());
    std::vector<std::string> texts;
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < rendered.size(); ++i) {
      if (!rendered[i].error.empty()) {
        out[i].error = "chat template: " + rendered[i].error;
        continue;
      }
      std::string t = rendered[i].text;
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
      out[i].opens_think = t.ends_with("<think>");  // a thinking template's generation prompt
      texts.push_back(rendered[i].text);
      at.push_back(i);
    }
    if (!texts.empty()) {
      const auto ids = call({{"op", "encode_rendered"}, {"texts", texts}}).at("ids").get<std::vector<std::vector<int32_t>>>();
      for (std::size_t k = 0; k < at.size(); ++k) out[at[k]].ids = ids.at(k);
    }
    return out;
  }

 private:
  json call(const json& req) {
    // Invalid UTF-8 in a request was caught by the JSON reader; replace, never throw, here.
    child_.write_line(req.dump(-1, ' ', false, json::error_handler_t::replace));
    const std::string line = child_.read_line(cfg_.timeout_s, path_);
    json r = json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object()) fail(ErrorKind::Internal, path_, ": unreadable answer from the tokenizer helper");
    if (r.contains("error")) fail(ErrorKind::BadInput, path_, ": ", r["error"].get<std::string>());
    return r;
  }
  std::string path_;
  TokenizerConfig cfg_;
  ChildProcess child_;
  std::unique_ptr<ChatTemplateRenderer> renderer_;  // started at the first chat prompt
  int64_t max_token_bytes_ = 0;
};

// tokenizer_config.json's add_bos_token (Llama and Mistral tokenizers add BOS; default true).
bool adds_bos(const std::string& dir) {
  const std::string path = (fs::path(dir) / "tokenizer_config.json").string();
  if (!check_regular_file(path)) return true;
  const json j = parse_json(read_regular_file(path), path);
  if (j.is_object() && j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) return j["add_bos_token"].get<bool>();
  return true;
}

}  // namespace

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& dir, const TokenizerConfig& cfg) {
  std::error_code ec;
  const fs::path js = fs::path(dir) / "tokenizer.json", sp = fs::path(dir) / "tokenizer.model";
  if (fs::is_regular_file(js, ec)) return std::make_unique<PythonTokenizer>(js.string(), cfg);
  if (fs::is_regular_file(sp, ec)) return std::make_unique<SentencePieceTokenizer>(sp.string(), adds_bos(dir));
  return nullptr;
}

}  // namespace moerun::io
