// The model's chat templates rendered in a helper process of their own (io/chat_template_helper.py),
// bounded per conversation: a time limit, an output limit (what max_position tokens can hold), and an
// address-space limit on the process. A conversation that overruns is its own error; the helper is
// killed and started again for the next one, so one request line never takes the batch down.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moerun::io {

class ChildProcess;

struct ChatTemplateBounds {
  double seconds = 5;  // per conversation (--template-timeout)
  int64_t memory_bytes = int64_t{1} << 30;  // the helper's address space (--template-memory)
};

struct RenderedChat {
  std::string text;
  std::string error;  // non-empty: this conversation's template failed, refused or overran
};

class ChatTemplateRenderer {
 public:
  // `tokenizer_json`: the model directory's tokenizer.json (the templates sit beside it).
  ChatTemplateRenderer(std::string tokenizer_json, std::string python, ChatTemplateBounds bounds);
  ~ChatTemplateRenderer();
  ChatTemplateRenderer(const ChatTemplateRenderer&) = delete;
  ChatTemplateRenderer& operator=(const ChatTemplateRenderer&) = delete;

  // Each conversation (messages and template_kwargs as JSON text, a template's name or text or "")
  // rendered, at most max_bytes of text each. Usage error (naming the interpreter) when the helper
  // cannot start or Python has no jinja2.
  struct Conversation {
    const std::string* messages;
    const std::string* template_kwargs;
    const std::string* chat_template;
  };
  std::vector<RenderedChat> render(const std::vector<Conversation>& conversations, int64_t max_bytes);
  int64_t restarts() const { return restarts_; }  // helpers killed after an overrun

 private:
  void start();
  std::string json_path_, python_;
  ChatTemplateBounds bounds_;
  std::unique_ptr<ChildProcess> child_;
  int64_t restarts_ = 0;
};

}  // namespace moerun::io
