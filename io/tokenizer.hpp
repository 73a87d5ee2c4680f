// Text <-> token ids, for requests that carry "prompt" text and results that carry "text". Only
// well-kept tokenizer libraries, never a hand-written BPE: SentencePiece (libsentencepiece, in
// process) for a model directory's tokenizer.model, and Hugging Face's `tokenizers` (a Python
// helper process, io/tokenizer_helper.py) for its tokenizer.json. Where a directory has both (Mixtral),
// tokenizer.json is used: it is what Hugging Face's own fast tokenizer runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/chat_template.hpp"
#include "io/openai_batch.hpp"

namespace moerun::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Special tokens (BOS) added as the model's tokenizer does; BadInput naming `where` on failure.
  virtual std::vector<std::vector<int32_t>> encode(const std::vector<std::string>& texts) = 0;
  // Special tokens (EOS) left out of the text.
  virtual std::vector<std::string> decode(const std::vector<std::vector<int32_t>>& ids) = 0;
  virtual std::string describe() const = 0;  // "sentencepiece DIR/tokenizer.model", ...
  // The bytes each token id decodes to alone, in id order (special tokens: none): what the text of
  // generated tokens is made of, for stop strings matched while generating.
  virtual std::vector<std::string> token_bytes() = 0;
  // Chat conversations through the model's chat template (bounded: io/chat_template.hpp), then
  // encoded (special tokens only as the template writes them); an error per conversation the
  // template refuses, cannot render or overruns. max_tokens (the model's max_position) bounds what a
  // render may produce. Only tokenizer.json models; others answer an error for each.
  virtual std::vector<ChatTokens> encode_chat(const std::vector<ChatPrompt>& prompts, int64_t /*max_tokens*/) {
    return std::vector<ChatTokens>(prompts.size(), ChatTokens{{}, describe() + ": chat templates need the model's tokenizer.json"});
  }
};

struct TokenizerConfig {
  std::string python = "python3";  // for tokenizer.json: an interpreter with the tokenizers package (MOERUN_PYTHON)
  double timeout_s = 300;  // per call to the helper
  ChatTemplateBounds templates;  // each chat template render's time and the render helper's memory
};

// The model directory's tokenizer; nullptr when it has none. Usage error (naming the interpreter
// and the hint to install `tokenizers`) when the Python helper cannot start.
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& model_dir, const TokenizerConfig& cfg);

}  // namespace moerun::io
