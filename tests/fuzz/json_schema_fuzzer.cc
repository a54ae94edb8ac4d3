// Structured outputs: a client's JSON Schema compiled into a grammar (JsonGrammar::FromSchema),
// the same schema as a forced tool call's parameters (ForcedToolCallGrammar), and a walk of
// each grammar's byte matcher steered by the input.
// Input: the schema text, "\0\0", then the walk's bytes.
// Properties: compiling never crashes or hangs; every state the walk reaches can still end
// (some byte is allowed, or the text is complete); each text completed greedily is one JSON
// value (the schema's grammar) or a call's markup around one (the tool grammar); in the XML
// form, a call the output parser reads back into arguments the schema accepts.

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status/check.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/output_parser.h"
#include "services/infer/text/tool_call_grammar.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/unit/services/infer/text/json_test_util.h"

namespace {

using cairn::infer::text::JsonGrammar;
namespace json = cairn::infer::text::json;

constexpr size_t kMaxWalk = 512;  // Steered bytes a grammar's walk reads at most.
constexpr auto kXml = cairn::infer::text::ToolCallMarkup::kXml;

// Walks `grammar` with the input's bytes (each taken as the first allowed byte at or after
// it), checking that every state can go on or is complete; returns the text completed greedily.
std::string Walk(const JsonGrammar& grammar, absl::string_view steer) {
  const auto* compiled = static_cast<const json::CompiledGrammar*>(&grammar);
  json::ByteMatcher m(compiled);
  std::string text;
  for (size_t i = 0; i < steer.size() && i < kMaxWalk; ++i) {
    bool moved = false;
    for (int k = 0; k < 256 && !moved; ++k) {
      const uint8_t b = static_cast<uint8_t>(static_cast<uint8_t>(steer[i]) + k);
      json::ByteMatcher next = m;
      if (next.Advance(b)) {
        m = next;
        text += static_cast<char>(b);
        moved = true;
      }
    }
    if (!moved) {
      CAIRN_CHECK(m.Complete());  // No byte continues an incomplete text.
      break;
    }
  }
  std::string rest;
  // Every reached state can still be completed.
  if (!cairn::infer::text::testing::Complete(m, &rest)) {
    std::fprintf(stderr, "cannot complete after: %s\nthen: %s\n", text.c_str(), rest.c_str());
    CAIRN_CHECK(false);
  }
  return text + rest;
}

}  // namespace

CAIRN_FUZZ_TARGET(JsonSchema) {
  cairn::fuzz::FuzzInput in(data, size);
  const std::string schema(cairn::fuzz::Std(in.Until(absl::string_view("\0\0", 2))));
  const absl::string_view steer = in.rest();
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> grammar = JsonGrammar::FromSchema(schema);
  if (!grammar.ok()) return 0;
  const std::string value = Walk(**grammar, steer);
  if (!nlohmann::json::accept(value)) std::fprintf(stderr, "not JSON: %s\n", value.c_str());
  CAIRN_CHECK(nlohmann::json::accept(value));

  // The same schema as two functions' parameters (FromSchema accepted it, so it is JSON whose
  // objects are few enough members for an ordered parse).
  const nlohmann::ordered_json parameters = nlohmann::ordered_json::parse(schema);
  const nlohmann::ordered_json tools = {
      {{"type", "function"}, {"function", {{"name", "a"}, {"parameters", parameters}}}},
      {{"type", "function"}, {"function", {{"name", "b\"c"}, {"parameters", parameters}}}}};
  for (const char* function : {"", "a"}) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> call =
        cairn::infer::text::ForcedToolCallGrammar(tools, function);
    CAIRN_CHECK(call.ok());  // Expressible parameters, nothing strict.
    const std::string text = Walk(**call, steer);
    constexpr absl::string_view kEnd = "}\n</tool_call>";
    CAIRN_CHECK(text.size() > kEnd.size() &&
                absl::string_view(text).substr(text.size() - kEnd.size()) == kEnd);
  }

  // The XML form (Qwen3.5's templates): where the form can write the parameters (the strict
  // functions' grammar compiles), every completed call parses back into arguments that the
  // schema's own grammar accepts; otherwise the parameters are free text and only completion
  // is checked.
  nlohmann::ordered_json strict_tools = tools;
  for (nlohmann::ordered_json& t : strict_tools) t["function"]["strict"] = true;
  for (const char* function : {"", "a"}) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> loose =
        cairn::infer::text::ForcedToolCallGrammar(tools, function, kXml);
    CAIRN_CHECK(loose.ok());  // Nothing strict: what the form cannot write is free.
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> strict =
        cairn::infer::text::ForcedToolCallGrammar(strict_tools, function, kXml);
    const std::string text = Walk(strict.ok() ? **strict : **loose, steer);
    if (!strict.ok()) continue;
    cairn::infer::text::OutputParserOptions options;
    options.format = cairn::infer::text::ToolCallFormat::kXml;
    options.tools = strict_tools;
    cairn::infer::text::OutputParser parser(options);
    const std::string opening = *function == '\0' ? "<tool_call>\n" : "<tool_call>\n<function=a>\n";
    cairn::infer::text::ParsedOutput out = parser.Push(opening + text);
    out.Append(parser.Finish());
    if (!out.warnings.empty() || out.tool_calls.empty() || !out.content.empty()) {
      std::fprintf(stderr, "XML call not read back: %s\n", (opening + text).c_str());
    }
    CAIRN_CHECK(out.warnings.empty() && !out.tool_calls.empty() && out.content.empty());
    for (const cairn::infer::text::ToolCall& call : out.tool_calls) {
      const std::string args = nlohmann::ordered_json::parse(call.arguments).dump();
      json::ByteMatcher m(static_cast<const json::CompiledGrammar*>(grammar->get()));
      if (!m.AdvanceAll(args) || !m.Complete()) {
        std::fprintf(stderr, "XML arguments %s not valid under the schema\n", args.c_str());
        CAIRN_CHECK(false);
      }
    }
  }
  return 0;
}
