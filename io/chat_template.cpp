// ChatTemplateRenderer: one conversation a line to the template helper, each answer awaited with a
// deadline; an overrun or a dead helper is that conversation's error and the helper starts anew.
#include "io/chat_template.hpp"

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "io/child_process.hpp"
#include "io/tokenizer_helper_source.hpp"  // kChatTemplateHelperSource, generated from chat_template_helper.py

namespace moerun::io {
using nlohmann::json;

namespace {
// The helper's own time limit stops a render that runs Python code; this grace covers one stuck in a
// single C call (a huge string operation), after which it is killed.
constexpr double kKillGraceSeconds = 2;
constexpr double kStartSeconds = 60;  // interpreter start and the jinja2 import
}  // namespace

ChatTemplateRenderer::ChatTemplateRenderer(std::string tokenizer_json, std::string python, ChatTemplateBounds bounds)
    : json_path_(std::move(tokenizer_json)), python_(std::move(python)), bounds_(bounds) {}

ChatTemplateRenderer::~ChatTemplateRenderer() = default;

void ChatTemplateRenderer::start() {
  const std::string where = json_path_ + ": the chat template helper";
  try {
    // -I (isolated): nothing from the working directory or PYTHON* variables is imported.
    child_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{python_, "-I", "-c", kChatTemplateHelperSource, json_path_, std::to_string(bounds_.memory_bytes)}, true,
        true);
    const json j = json::parse(child_->read_line(kStartSeconds, where), nullptr, false);
    if (j.is_object() && j.contains("missing"))
      fail(ErrorKind::Usage, json_path_, ": ", python_, " has no jinja2 package (", j.value("error", std::string()),
           "); chat templates need it: pip install jinja2, and MOERUN_PYTHON=that python");
    if (!j.is_object() || !j.value("ready", false)) fail(ErrorKind::Io, where, " did not start: ", j.dump());
  } catch (const Error& e) {
    child_.reset();
    if (e.kind() == ErrorKind::Usage) throw;
    fail(ErrorKind::Usage, where, " did not start with ", python_, " (", e.what(), "); MOERUN_PYTHON names the interpreter");
  }
}

std::vector<RenderedChat> ChatTemplateRenderer::render(const std::vector<Conversation>& conversations, int64_t max_bytes) {
  std::vector<RenderedChat> out(conversations.size());
  for (std::size_t i = 0; i < conversations.size(); ++i) {
    const Conversation& c = conversations[i];
    json req{{"messages", json::parse(*c.messages)},
             {"kwargs", json::parse(*c.template_kwargs)},
             {"max_bytes", max_bytes},
             {"seconds", bounds_.seconds}};
    if (!c.chat_template->empty()) req["template"] = *c.chat_template;
    if (!child_) start();
    std::string line;
    try {
      child_->write_line(req.dump(-1, ' ', false, json::error_handler_t::replace));
      line = child_->read_line(bounds_.seconds + kKillGraceSeconds, "the chat template");
    } catch (const Error& e) {
      // Stuck past its own limit or dead (its memory limit, a signal): this line's error, a new helper next.
      child_.reset();
      ++restarts_;
      out[i].error = str("overran its bounds (", bounds_.seconds, " s, ", bounds_.memory_bytes >> 20,
                         " MiB; --template-timeout, --template-memory): ", e.what());
      continue;
    }
    const json a = json::parse(line, nullptr, false);
    if (a.is_object() && a.contains("text") && a["text"].is_string())
      out[i].text = a["text"].get<std::string>();
    else if (a.is_object() && a.contains("error") && a["error"].is_string())
      out[i].error = a["error"].get<std::string>();
    else
      out[i].error = "unreadable answer from the chat template helper";
    if (a.is_object() && a.value("bound", false)) {
      // A MemoryError may leave the interpreter short of memory: start it anew.
      child_.reset();
      ++restarts_;
      out[i].error += str(" (--template-timeout ", bounds_.seconds, " s, --template-memory ", bounds_.memory_bytes >> 20, " MiB)");
    }
  }
  return out;
}

}  // namespace moerun::io
