#ifndef CAIRN_SERVICES_INFER_MODELS_DEMO_MODEL_H_
#define CAIRN_SERVICES_INFER_MODELS_DEMO_MODEL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cairn::infer {

// Where tools/fetch-test-data unpacks the real Qwen3 tokenizer, relative to the repository root.
inline constexpr char kDefaultQwen3TokenizerDir[] = "tests/data/downloads/tokenizer-qwen3/models";

// Returns the chat template Cairn's demo model ships (written for Cairn, in the style of Qwen3's
// ChatML): an optional system turn that lists the tools as JSON, tool calls as JSON objects in
// <tool_call> tags, tool results in <tool_response> tags inside a user turn, and a generation
// prompt that opens a <think> block (an empty one when `enable_thinking` is false). Reasoning
// of earlier assistant turns is never rendered, so the next request of a conversation repeats
// this one's prompt up to its generation prompt.
std::string_view DemoChatTemplate();

// Returns NotFound naming the missing file (and the command that fetches it) unless
// `tokenizer_dir` holds tokenizer.json and tokenizer_config.json.
absl::Status CheckDemoTokenizerDir(const std::string& tokenizer_dir);

// Makes `model_dir` a text model: copies tokenizer.json and tokenizer_config.json from
// `tokenizer_dir` (the config without its own chat_template, whose text is not ours to ship)
// and writes DemoChatTemplate() as chat_template.jinja. The errors of CheckDemoTokenizerDir,
// InvalidArgument when
// tokenizer_config.json is not a JSON object, Internal for I/O errors.
absl::Status WriteDemoTextFiles(const std::string& model_dir, const std::string& tokenizer_dir);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_DEMO_MODEL_H_
