#include "services/infer/text/tool_call_grammar.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "services/infer/text/json_grammar.h"

namespace cairn::infer::text {
namespace {

using Json = nlohmann::ordered_json;

// The texts of Qwen3's JSON tool-call markup around a call's JSON.
constexpr absl::string_view kCallEndBrace = "}\n</tool_call>";  // After the arguments.
constexpr absl::string_view kNextCall = "\n<tool_call>\n";

struct Function {
  std::string name;
  Json parameters;  // A schema; {"type": "object"} when the definition has none.
  bool strict = false;
};

// The function tools of `tools` that have a name (others are skipped).
std::vector<Function> Functions(const Json& tools) {
  std::vector<Function> out;
  if (!tools.is_array()) return out;
  for (const Json& t : tools) {
    if (!t.is_object()) continue;
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) continue;
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) continue;
    Function f;
    f.name = name->get<std::string>();
    auto params = fn->find("parameters");
    f.parameters = params == fn->end() || params->is_null() ? Json{{"type", "object"}} : *params;
    auto strict = fn->find("strict");
    f.strict = strict != fn->end() && strict->is_boolean() && strict->get<bool>();
    out.push_back(std::move(f));
  }
  return out;
}

const json::CompiledGrammar& Compiled(const JsonGrammar& g) {
  return dynamic_cast<const json::CompiledGrammar&>(g);
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// `function`'s parameters compiled, or any object where they cannot be (not for a strict one).
absl::StatusOr<std::shared_ptr<const JsonGrammar>> Arguments(const Function& f) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(Dump(f.parameters));
  if (g.ok()) return g;
  if (f.strict) {
    return absl::InvalidArgumentError(
        absl::StrCat("the parameters of strict function \"", f.name, "\": ", g.status().message()));
  }
  return JsonGrammar::AnyObject();
}

// The key under the composite's $defs for a definition of function `i`'s parameters (`section`
// "$defs" or "definitions"; `name` as in the document), or for the parameters themselves.
std::string DefKey(size_t i, absl::string_view section = {}, absl::string_view name = {}) {
  std::string key = absl::StrCat("function", i);
  if (!section.empty()) absl::StrAppend(&key, ".", section, ".", name);
  return key;
}

// Points the $refs of one function's parameters schema (refs to "#" and to its own $defs and
// definitions, the ones FromSchema resolves) at their places in the composite's $defs. The walk
// follows the keywords whose values are schemas only, so that data ("const", "enum",
// "default") and property names are left as they are.
void RewriteRefs(Json& schema, size_t i) {
  if (!schema.is_object()) return;
  for (auto& [key, value] : schema.items()) {
    if (key == "$ref") {
      if (!value.is_string()) continue;
      const std::string ref = value.get<std::string>();
      if (ref == "#") {
        value = absl::StrCat("#/$defs/", DefKey(i));
        continue;
      }
      for (absl::string_view section : {"$defs", "definitions"}) {
        const std::string start = absl::StrCat("#/", section, "/");
        if (ref.rfind(start, 0) == 0) {
          // The name keeps its pointer escapes (~0, ~1): the prefix adds none.
          value = absl::StrCat("#/$defs/", DefKey(i, section, ref.substr(start.size())));
          break;
        }
      }
    } else if (key == "properties" || key == "$defs" || key == "definitions" ||
               key == "patternProperties" || key == "dependentSchemas") {
      if (!value.is_object()) continue;
      for (auto& [name, sub] : value.items()) RewriteRefs(sub, i);
    } else if (key == "anyOf" || key == "oneOf" || key == "allOf" || key == "prefixItems" ||
               key == "items") {
      if (value.is_array()) {
        for (Json& sub : value) RewriteRefs(sub, i);
      } else {
        RewriteRefs(value, i);
      }
    } else if (key == "additionalProperties" || key == "not" || key == "if" || key == "then" ||
               key == "else" || key == "contains" || key == "propertyNames" ||
               key == "unevaluatedProperties" || key == "unevaluatedItems" ||
               key == "additionalItems") {
      RewriteRefs(value, i);
    }
  }
}

// A named function's call: its arguments, then the call's end.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> NamedCall(const JsonGrammar& arguments) {
  const json::CompiledGrammar& compiled = Compiled(arguments);
  return json::CompiledGrammar::Framed(compiled, {json::SeqItem::Value(compiled.root()),
                                                  json::SeqItem::Text(std::string(kCallEndBrace))});
}

// The schema {"anyOf": [the parameters of each of `functions`]}: each function's own (or any
// object, where `expressible[i]` is false), their definitions under the composite's $defs.
// Compiled, the root is an alternative whose alts are the functions' nodes in order.
Json ParametersSchema(const std::vector<Function>& functions,
                      const std::vector<bool>& expressible) {
  Json defs = Json::object();
  Json each = Json::array();
  for (size_t i = 0; i < functions.size(); ++i) {
    if (!expressible[i]) {
      each.push_back(Json{{"type", "object"}});
      continue;
    }
    Json params = functions[i].parameters;
    RewriteRefs(params, i);
    for (absl::string_view section : {"$defs", "definitions"}) {
      auto found = params.find(std::string(section));
      if (found == params.end()) continue;
      if (found->is_object()) {
        for (auto& [name, def] : found->items()) defs[DefKey(i, section, name)] = def;
      }
      params.erase(found);
    }
    defs[DefKey(i)] = std::move(params);
    each.push_back(Json{{"$ref", absl::StrCat("#/$defs/", DefKey(i))}});
  }
  Json schema = {{"anyOf", std::move(each)}};
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return schema;
}

// One call of any of `functions` after `opening` (none when empty), then more after `again`
// (none when empty): the name's text picks the arguments' grammar, so that any number of
// functions is one choice rather than one alternative each (a matcher follows at most
// kMaxParallelStacks alternatives, and every call begins alike).
absl::StatusOr<std::shared_ptr<const JsonGrammar>> AnyCall(const std::vector<Function>& functions,
                                                           const std::vector<bool>& expressible,
                                                           absl::string_view opening,
                                                           absl::string_view again) {
  ASSIGN_OR_RETURN(std::shared_ptr<const JsonGrammar> parameters,
                   JsonGrammar::FromSchema(Dump(ParametersSchema(functions, expressible))));
  const json::CompiledGrammar& compiled = Compiled(*parameters);
  // The root is the alias of "#" (FromSchema compiles the document as a reference to it), whose
  // one alternative is the anyOf's.
  const json::Node& alias = compiled.node(compiled.root());
  const json::Node& root = alias.kind == json::NodeKind::kAlt && alias.alts.size() == 1
                               ? compiled.node(alias.alts[0])
                               : alias;
  if (root.kind != json::NodeKind::kAlt || root.alts.size() != functions.size()) {
    return absl::InternalError("the functions' parameters did not compile to one alternative each");
  }
  json::SeqItem choice;
  choice.kind = json::SeqItem::Kind::kChoice;
  for (const Function& f : functions) {
    choice.texts.push_back(absl::StrCat("{\"name\": ", Dump(Json(f.name)), ", \"arguments\":"));
  }
  json::SeqItem arguments;
  arguments.kind = json::SeqItem::Kind::kChosenValue;
  arguments.values = root.alts;
  std::vector<json::SeqItem> items;
  if (!opening.empty()) items.push_back(json::SeqItem::Text(std::string(opening)));
  items.push_back(std::move(choice));
  items.push_back(std::move(arguments));
  items.push_back(json::SeqItem::Text(std::string(kCallEndBrace)));
  return json::CompiledGrammar::Framed(compiled, std::move(items), std::string(again));
}

// Whether FromSchema compiles each function's parameters (an object schema), in order.
std::vector<bool> Expressible(const std::vector<Function>& functions) {
  std::vector<bool> out;
  for (const Function& f : functions) {
    out.push_back(f.parameters.is_object() && JsonGrammar::FromSchema(Dump(f.parameters)).ok());
  }
  return out;
}

// JsonConstraint for TriggeredConstraint. Thread-compatible: one request's.
class TriggeredJsonConstraint final : public JsonConstraint {
 public:
  TriggeredJsonConstraint(std::shared_ptr<const JsonGrammar> call, const TokenIndex* index,
                          TokenId trigger)
      : call_(std::move(call)), index_(index), trigger_(trigger) {}

  absl::Status Allowed(absl::Span<uint64_t> allowed) override {
    if (held_ != nullptr) return held_->Allowed(allowed);
    std::fill(allowed.begin(), allowed.end(), 0);
    for (TokenId id = 0; id < index_->id_limit(); ++id) {
      if (static_cast<size_t>(id) / 64 >= allowed.size()) break;
      allowed[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<uint32_t>(id) % 64);
    }
    return absl::OkStatus();
  }
  absl::Status Accept(TokenId token) override {
    if (held_ == nullptr) {
      // Held from the token after the trigger; end ids never end a held call.
      if (token == trigger_) held_ = JsonConstraint::Create(call_, index_, {});
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(held_->Accept(token));
    if (held_->Complete()) held_.reset();
    return absl::OkStatus();
  }
  bool Complete() const override { return held_ == nullptr; }
  bool Unconstrained() const override { return held_ == nullptr; }

 private:
  const std::shared_ptr<const JsonGrammar> call_;
  const TokenIndex* const index_;
  const TokenId trigger_;
  std::unique_ptr<JsonConstraint> held_;  // The call under way; null while free.
};

}  // namespace

absl::StatusOr<std::shared_ptr<const JsonGrammar>> ForcedToolCallGrammar(
    const nlohmann::ordered_json& tools, std::string_view function) {
  const std::vector<Function> functions = Functions(tools);
  if (functions.empty()) {
    return absl::InvalidArgumentError("a forced tool call needs functions, and tools have none");
  }
  if (!function.empty()) {
    for (const Function& f : functions) {
      if (f.name != function) continue;
      ASSIGN_OR_RETURN(std::shared_ptr<const JsonGrammar> arguments, Arguments(f));
      absl::StatusOr<std::shared_ptr<const JsonGrammar>> call = NamedCall(*arguments);
      // Framed, the arguments sit a level deeper: one that needs every level is any object.
      if (call.ok() || f.strict) return call;
      return NamedCall(*JsonGrammar::AnyObject());
    }
    return absl::InvalidArgumentError(
        absl::StrCat("the request's tools define no function \"",
                     absl::string_view(function.data(), function.size()), "\""));
  }
  const std::vector<bool> expressible = Expressible(functions);
  for (size_t i = 0; i < functions.size(); ++i) {
    if (!expressible[i]) RETURN_IF_ERROR(Arguments(functions[i]).status());  // Strict ones.
  }
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> call =
      AnyCall(functions, expressible, "", kNextCall);
  if (call.ok()) return call;
  // Past the grammar's bounds together (each one alone compiled): the names alone.
  for (const Function& f : functions) {
    if (f.strict) {
      return absl::InvalidArgumentError(
          absl::StrCat("the functions' parameters together: ", call.status().message()));
    }
  }
  return AnyCall(functions, std::vector<bool>(functions.size(), false), "", kNextCall);
}

absl::StatusOr<std::shared_ptr<const JsonGrammar>> StrictToolCallGrammar(
    const nlohmann::ordered_json& tools) {
  const std::vector<Function> functions = Functions(tools);
  std::vector<bool> schema = Expressible(functions);
  bool any_strict = false;
  for (size_t i = 0; i < functions.size(); ++i) {
    any_strict |= functions[i].strict;
    schema[i] = schema[i] && functions[i].strict;
  }
  if (!any_strict) return nullptr;
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> call = AnyCall(functions, schema, "\n", "");
  if (call.ok()) return call;
  return AnyCall(functions, std::vector<bool>(functions.size(), false), "\n", "");
}

std::unique_ptr<JsonConstraint> TriggeredConstraint(std::shared_ptr<const JsonGrammar> call,
                                                    const TokenIndex* index, TokenId trigger) {
  return std::make_unique<TriggeredJsonConstraint>(std::move(call), index, trigger);
}

}  // namespace cairn::infer::text
