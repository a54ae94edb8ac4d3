#ifndef CAIRN_SERVICES_INFER_TEXT_OUTPUT_PARSER_H_
#define CAIRN_SERVICES_INFER_TEXT_OUTPUT_PARSER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace cairn::infer::text {

// The tool-call body formats of docs/model.md §6.4.
enum class ToolCallFormat {
  kJson,  // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen3, Qwen3-Next)
  kXml,   // <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>
  kAuto,  // Per call: XML when the body starts with "<function=", else JSON.
};

struct OutputParserOptions {
  // True when the prompt ended inside a reasoning block (a generation prompt ending in
  // "<think>\n"): generated text is reasoning until the closing tag.
  bool starts_in_reasoning = false;
  bool parse_reasoning = true;
  bool parse_tool_calls = true;
  ToolCallFormat format = ToolCallFormat::kAuto;
  std::string think_open = "<think>";
  std::string think_close = "</think>";
  std::string tool_open = "<tool_call>";
  std::string tool_close = "</tool_call>";
  // OpenAI tool definitions of the request (or null). XML parameter values whose schema is not
  // read as a string (XmlParamIsString) are parsed as JSON, or as Python's True, False and None
  // (kept as strings where neither reads them); without a schema they stay strings.
  nlohmann::ordered_json tools = nullptr;
  // Tool call ids are this prefix followed by the call's index in the response.
  std::string tool_call_id_prefix = "call_";
  // Text the prompt ended with that the answer continues as its own (a forced tool call's
  // opening, RenderedPrompt::forced_text): parsed before the first pushed text, and what it
  // yields returned with the first Push or Finish.
  std::string prompt_tail;
};

// Whether the XML form's value of a parameter whose schema is `param` is its text as it is (a
// string) rather than JSON: where the types the schema names ("type", a name or a list, and
// those of its anyOf/oneOf members, one level down) include "string", or where they are not all
// named (no "type", a $ref). The grammar of forced XML calls (tool_call_grammar.h) follows it.
bool XmlParamIsString(const nlohmann::ordered_json& param);

// An OpenAI tool call: {"id", "type": "function", "function": {"name", "arguments"}}.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // A JSON object, serialised (json.dumps style).
};

// Output recovered from a piece of generated text. For streaming, each field holds only what
// this piece added.
struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
  // One message per malformed tool call that was returned as content instead.
  std::vector<std::string> warnings;

  // Appends `other`'s fields to this one's.
  void Append(ParsedOutput other);
};

// Splits generated text into reasoning, content and tool calls, incrementally: text can be pushed
// in arbitrary pieces (a tag may be split across pieces) and the concatenated results equal
// parsing the whole text at once.
//   - Reasoning is the text inside <think>…</think> (or from the start when
//     `starts_in_reasoning`), without the newlines that directly follow the opening tag or
//     precede the closing one; newlines after </think> are dropped. Only a <think> at the
//     answer's start (after whitespace at most) opens a block; later it is text. A tool call
//     opened inside an open block is held: a </think> after it makes it part of the reasoning
//     (a draft), the output's end makes it a call (the block was never closed).
//   - A tool call is <tool_call>…</tool_call>; a body that does not parse is returned verbatim
//     (tags included) as content with a warning, never dropped. An unterminated call at Finish
//     is content with a warning too.
//   - Whitespace between and after tool calls and before the first one is dropped.
// Thread-compatible.
class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);

  // Consumes `text` and returns what became certain. Text that may still be the start of a tag
  // is held back until the next Push or Finish.
  ParsedOutput Push(std::string_view text);
  // Returns everything still held back; the parser is then finished.
  ParsedOutput Finish();

 private:
  enum class Mode { kContent, kReasoning, kToolCall };

  void Process(bool final, ParsedOutput* out);
  void EmitContent(std::string_view text, ParsedOutput* out);
  void CompleteToolCall(std::string_view body, ParsedOutput* out);
  size_t HeldPrefix(std::string_view text, bool content_mode) const;

  const OutputParserOptions options_;
  Mode mode_;
  std::string buffer_;
  bool at_reasoning_start_;         // Drop newlines right after <think>.
  bool after_think_close_ = false;  // Drop newlines right after </think>.
  // No content, reasoning block or tool call came yet: a <think> opens reasoning.
  bool think_open_allowed_ = true;
  std::string held_whitespace_;     // Content whitespace waiting for non-whitespace text.
  int tool_calls_ = 0;
  bool finished_ = false;
  ParsedOutput pending_;  // What `prompt_tail` yielded, until the first Push or Finish.
};

// Parses a complete generated text (Push + Finish).
ParsedOutput ParseOutput(std::string_view text, const OutputParserOptions& options);

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_OUTPUT_PARSER_H_
