#ifndef CAIRN_SERVICES_INFER_TEXT_TOOL_CALL_GRAMMAR_H_
#define CAIRN_SERVICES_INFER_TEXT_TOOL_CALL_GRAMMAR_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/json_constraint.h"

namespace cairn::infer::text {

// The grammar of what a forced tool call generates after its opening (ForcedToolCallText,
// chat_template.h), for templates that write calls as JSON (ToolCallMarkup::kJson, Qwen3's
// form: `<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>`, calls apart by "\n"):
// - `function` empty (tool_choice "required"): `{"name": N, "arguments": A}\n</tool_call>` for
//   a function N of `tools` and arguments A that its parameters' schema accepts, then as many
//   more calls as the model writes, each after "\n<tool_call>\n";
// - `function` a name: arguments its parameters accept, then `}\n</tool_call>`.
// The answer ends there (JsonConstraint's end ids).
//
// `tools` are OpenAI tool definitions: [{"type": "function", "function": {"name", "parameters",
// "strict"}}]. Parameters that JsonGrammar::FromSchema cannot express are read as any JSON
// object, as is every function's when the functions together pass the grammar's bounds, unless
// the function is strict ("strict": true): then InvalidArgument naming it. InvalidArgument too
// for a `function` that `tools` do not define, and for no functions at all.
//
// With `markup` kXml (Qwen3-Coder's and Qwen3.5's form: `<tool_call>\n<function=NAME>\n`, then
// `<parameter=KEY>\nVALUE\n</parameter>\n` for each argument, `</function>\n</tool_call>`),
// the same after the XML opening: a named function's parameters, in its schema's order
// (required ones always), `</function>\n</tool_call>`; "required" `<function=NAME>\n` for a
// function N whose name the form can write, then its parameters, and so on. A value that the
// output parser reads as a string (XmlParamIsString, output_parser.h) is text as it is, never
// holding `</parameter>` or `</tool_call>`, within its schema's string constraints; others
// are JSON by their schema. Parameters the form cannot write (not one object of properties,
// members besides them, a name with '>' or a line break) are free text up to `</function>`, or
// InvalidArgument for a strict function.
// With `single`, "required" is one call only (no further calls after it).
absl::StatusOr<std::shared_ptr<const JsonGrammar>> ForcedToolCallGrammar(
    const nlohmann::ordered_json& tools, std::string_view function,
    ToolCallMarkup markup = ToolCallMarkup::kJson, bool single = false);

// The grammar of a call that the model opens itself (tool_choice "auto"), from after the
// template's `<tool_call>` token: "\n", `{"name": N, "arguments": A}` for a function N of
// `tools`, "\n</tool_call>". A follows N's parameters where N is strict ("strict": true) and
// they are expressible, else it is any JSON object. nullptr when no function is strict (the
// caller then leaves calls free, as the model writes them). With `markup` kXml: "\n", then
// as ForcedToolCallGrammar's "required" for one call (strict functions' parameters by their
// schema, others free).
absl::StatusOr<std::shared_ptr<const JsonGrammar>> StrictToolCallGrammar(
    const nlohmann::ordered_json& tools, ToolCallMarkup markup = ToolCallMarkup::kJson);

// The tokens a TriggeredConstraint watches for.
struct CallTokens {
  TokenId open = -1;   // The template's `<tool_call>` token.
  TokenId close = -1;  // Its `</tool_call>` token: ends a call no grammar holds (-1: none).
  // Not empty: one call only; once it ends, only these (the end of the turn) may follow.
  std::vector<TokenId> end_after_call;
};

// A constraint that leaves the answer free until the model generates `tokens.open`, holds what
// follows to `call` until that is complete (with no `call`, leaves it free until
// `tokens.close`), then is free again (every further call is held the same way) or, with
// `tokens.end_after_call`, allows only those ids. Errors of the held part as JsonConstraint's.
std::unique_ptr<JsonConstraint> TriggeredConstraint(std::shared_ptr<const JsonGrammar> call,
                                                    const TokenIndex* index, CallTokens tokens);

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_TOOL_CALL_GRAMMAR_H_
