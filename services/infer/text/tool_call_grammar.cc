#include "services/infer/text/tool_call_grammar.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/output_parser.h"

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

// Where the output parser ends a call, wherever it appears: no string in it may hold it.
constexpr absl::string_view kCallClose = "</tool_call>";

// The literal texts of trie `root` (each once, in byte order), walked with one path.
std::vector<std::string> TrieLiterals(const std::vector<json::TrieNode>& tries, int32_t root) {
  std::vector<std::string> out;
  if (tries[static_cast<size_t>(root)].terminal >= 0) out.emplace_back();
  std::string path;
  std::vector<std::pair<int32_t, size_t>> stack{{root, 0}};  // (trie node, next child).
  while (!stack.empty()) {
    const int32_t t = stack.back().first;
    const size_t i = stack.back().second++;
    const auto& children = tries[static_cast<size_t>(t)].children;
    if (i == children.size()) {
      stack.pop_back();
      if (!stack.empty()) path.pop_back();
      continue;
    }
    path.push_back(static_cast<char>(children[i].first));
    if (tries[static_cast<size_t>(children[i].second)].terminal >= 0) out.push_back(path);
    stack.push_back({children[i].second, 0});
  }
  return out;
}

bool HoldsAny(absl::string_view text, const std::vector<std::string>& texts) {
  for (const std::string& t : texts) {
    if (absl::StrContains(text, t)) return true;
  }
  return false;
}

// Makes the JSON values of `nodes` never hold `texts` as written: every string refuses them
// (Node::forbid), enum and const values that hold one are left out. InvalidArgument where an
// object's property name holds one.
absl::Status ForbidInValues(std::vector<json::Node>& nodes, std::vector<json::TrieNode>& tries,
                            const std::vector<std::string>& texts) {
  for (json::Node& node : nodes) {
    if (node.kind == json::NodeKind::kString && !node.raw) node.forbid = texts;
    if (node.kind == json::NodeKind::kLiteral) {
      std::vector<std::string> literals = TrieLiterals(tries, node.trie);
      const size_t all = literals.size();
      literals.erase(std::remove_if(literals.begin(), literals.end(),
                                    [&](const std::string& l) { return HoldsAny(l, texts); }),
                     literals.end());
      if (literals.size() != all) node.trie = json::AddTrie(tries, literals, false);
    }
    if (node.kind == json::NodeKind::kObject && !node.markup) {
      for (const json::Property& p : node.props) {
        if (HoldsAny(p.name, texts)) {
          return absl::InvalidArgumentError(
              absl::StrCat("property \"", p.name, "\" holds the call's markup"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// `grammar` with its values refusing the call's closing tag.
absl::StatusOr<std::shared_ptr<const json::CompiledGrammar>> WithoutCallClose(
    const json::CompiledGrammar& grammar) {
  return json::CompiledGrammar::Extended(
      grammar, [](std::vector<json::Node>& nodes, std::vector<json::TrieNode>& tries) {
        return ForbidInValues(nodes, tries, {std::string(kCallClose)});
      });
}

// A named function's call: its arguments, then the call's end.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> NamedCall(const JsonGrammar& arguments) {
  ASSIGN_OR_RETURN(std::shared_ptr<const json::CompiledGrammar> compiled,
                   WithoutCallClose(Compiled(arguments)));
  return json::CompiledGrammar::Framed(
      *compiled,
      {json::SeqItem::Value(compiled->root()), json::SeqItem::Text(std::string(kCallEndBrace))});
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

// The alternative of ParametersSchema(functions) compiled, whose alts are the functions' nodes
// in order. The root is the alias of "#" (FromSchema compiles the document as a reference to
// it), whose one alternative is the anyOf's.
absl::StatusOr<const json::Node*> FunctionsAlternative(const json::CompiledGrammar& compiled,
                                                       size_t functions) {
  const json::Node& alias = compiled.node(compiled.root());
  const json::Node& root = alias.kind == json::NodeKind::kAlt && alias.alts.size() == 1
                               ? compiled.node(alias.alts[0])
                               : alias;
  if (root.kind != json::NodeKind::kAlt || root.alts.size() != functions) {
    return absl::InternalError("the functions' parameters did not compile to one alternative each");
  }
  return &root;
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
  ASSIGN_OR_RETURN(const json::Node* root, FunctionsAlternative(compiled, functions.size()));
  json::SeqItem choice;
  choice.kind = json::SeqItem::Kind::kChoice;
  for (const Function& f : functions) {
    choice.texts.push_back(absl::StrCat("{\"name\": ", Dump(Json(f.name)), ", \"arguments\":"));
  }
  json::SeqItem arguments;
  arguments.kind = json::SeqItem::Kind::kChosenValue;
  arguments.values = root->alts;
  std::vector<json::SeqItem> items;
  if (!opening.empty()) items.push_back(json::SeqItem::Text(std::string(opening)));
  items.push_back(std::move(choice));
  items.push_back(std::move(arguments));
  items.push_back(json::SeqItem::Text(std::string(kCallEndBrace)));
  ASSIGN_OR_RETURN(std::shared_ptr<const json::CompiledGrammar> strings,
                   WithoutCallClose(compiled));
  return json::CompiledGrammar::Framed(*strings, std::move(items), std::string(again));
}

// The texts of the XML tool-call markup (ToolCallMarkup::kXml) around and inside a call.
constexpr absl::string_view kXmlFunctionOpen = "<function=";
constexpr absl::string_view kXmlParamOpen = "<parameter=";
constexpr absl::string_view kXmlParamEnd = "\n</parameter>\n";
constexpr absl::string_view kXmlParamClose = "</parameter>";  // Ends a value where it appears.
constexpr absl::string_view kXmlFunctionClose = "</function>";
constexpr absl::string_view kXmlCallEnd = "\n</tool_call>";

// What a parameter name written in the XML form never holds: OutputParser reads a name to the
// first '>', and '<' could begin the call's closing tag with it.
constexpr absl::string_view kXmlNameStops = "<>\n\r";

// Whether `name` can be written in the XML markup and read back as it is (OutputParser also
// trims whitespace around a name).
bool XmlNameFits(absl::string_view name) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  return !name.empty() && !blank(name.front()) && !blank(name.back()) &&
         name.find_first_of(kXmlNameStops) == absl::string_view::npos;
}

// The XML form's texts of a markup object (Node::markup), as the templates write them.
void XmlMarkup(json::Node& node) {
  node.markup = true;
  node.member_end = std::string(kXmlParamEnd);
  node.close = std::string(kXmlFunctionClose);
}

// A raw string node of the XML form (Node::raw) for a parameter's value.
json::Node XmlRawValue(json::Node node) {
  node.kind = json::NodeKind::kString;
  node.raw = true;
  node.forbid = {std::string(kXmlParamClose), std::string(kCallClose)};
  node.raw_exit = kXmlParamEnd[0];
  return node;
}

// The most string alternatives one XML value keeps (each is a stack of the matcher's at every
// newline: json::kMaxParallelStacks bounds them all).
constexpr size_t kMaxXmlStringAlternatives = 8;

// Appends the raw string node of an additional member's name in the XML form.
int32_t XmlExtraKey(std::vector<json::Node>& nodes) {
  json::Node key;
  key.kind = json::NodeKind::kString;
  key.raw = true;
  key.min_length = 1;
  for (char c : kXmlNameStops) key.forbid.emplace_back(1, c);
  key.raw_exit = '>';
  nodes.push_back(std::move(key));
  return static_cast<int32_t>(nodes.size() - 1);
}

// Appends the node of an XML parameter value read as a string (XmlParamIsString): the string
// values of node `value` written as they are, its other values left out. InvalidArgument
// where it has none.
absl::StatusOr<int32_t> XmlStringValue(std::vector<json::Node>& nodes,
                                       std::vector<json::TrieNode>& tries, int32_t value,
                                       absl::string_view param) {
  std::vector<int32_t> concrete;
  std::vector<int32_t> todo{value};
  absl::flat_hash_set<int32_t> seen;
  while (!todo.empty()) {
    const int32_t n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    if (nodes[static_cast<size_t>(n)].kind == json::NodeKind::kAlt) {
      for (auto it = nodes[static_cast<size_t>(n)].alts.rbegin();
           it != nodes[static_cast<size_t>(n)].alts.rend(); ++it) {
        todo.push_back(*it);
      }
    } else {
      concrete.push_back(n);
    }
  }
  std::vector<int32_t> alts;
  std::vector<std::string> literals;
  bool empty_literal = false;
  for (int32_t c : concrete) {
    const json::Node& node = nodes[static_cast<size_t>(c)];
    if (node.min_depth >= json::kUnreachable) continue;  // No value (contradictory bounds).
    if (node.kind == json::NodeKind::kString && node.exclude_trie < 0) {
      alts.push_back(static_cast<int32_t>(nodes.size()));
      nodes.push_back(XmlRawValue(node));
    } else if (node.kind == json::NodeKind::kLiteral) {
      for (const std::string& literal : TrieLiterals(tries, node.trie)) {
        const Json parsed = Json::parse(literal, nullptr, false);
        if (!parsed.is_string()) continue;
        std::string text = parsed.get<std::string>();
        if (text.empty()) {
          empty_literal = true;
        } else if (!absl::StrContains(text, kXmlParamClose) &&
                   !absl::StrContains(text, kCallClose)) {
          literals.push_back(std::move(text));
        }
      }
    }
  }
  if (!literals.empty()) {
    json::Node lit;
    lit.kind = json::NodeKind::kLiteral;
    lit.path = nodes[static_cast<size_t>(value)].path;
    lit.trie = json::AddTrie(tries, literals, false);
    alts.push_back(static_cast<int32_t>(nodes.size()));
    nodes.push_back(std::move(lit));
  }
  if (empty_literal) {
    json::Node empty;
    empty.kind = json::NodeKind::kString;
    empty.path = nodes[static_cast<size_t>(value)].path;
    empty.max_length = 0;
    alts.push_back(static_cast<int32_t>(nodes.size()));
    nodes.push_back(XmlRawValue(std::move(empty)));
  }
  if (alts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter \"", param,
                     "\": the XML form reads its value as a string, and its schema accepts none"));
  }
  if (alts.size() > kMaxXmlStringAlternatives) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"", param, "\": more than ",
                                                   kMaxXmlStringAlternatives,
                                                   " kinds of string for the XML form"));
  }
  if (alts.size() == 1) return alts[0];
  json::Node alt;
  alt.kind = json::NodeKind::kAlt;
  alt.path = nodes[static_cast<size_t>(value)].path;
  alt.alts = std::move(alts);
  nodes.push_back(std::move(alt));
  return static_cast<int32_t>(nodes.size() - 1);
}

// Appends the node of `f`'s parameters in the XML form, from their compiled node `params`
// (an object of `properties`): its members `<parameter=NAME>\nVALUE\n</parameter>\n` in the
// schema's order, required ones always, then `</function>`; a value read as a string
// (XmlParamIsString) as its text, others as JSON. InvalidArgument for what the form cannot
// write: parameters that are not one object of properties, members besides them, a name that
// does not fit, a value read as a string whose schema accepts none.
absl::StatusOr<int32_t> XmlParameters(std::vector<json::Node>& nodes,
                                      std::vector<json::TrieNode>& tries, int32_t params,
                                      const Function& f) {
  absl::flat_hash_set<int32_t> seen;
  while (nodes[static_cast<size_t>(params)].kind == json::NodeKind::kAlt &&
         nodes[static_cast<size_t>(params)].alts.size() == 1 && seen.insert(params).second) {
    params = nodes[static_cast<size_t>(params)].alts[0];
  }
  const json::Node object = nodes[static_cast<size_t>(params)];  // A copy: nodes grows below.
  if (object.kind != json::NodeKind::kObject || object.markup) {
    return absl::InvalidArgumentError("the XML form writes parameters that are one object only");
  }
  if (object.additional >= 0 && !object.props.empty()) {
    return absl::InvalidArgumentError(
        "the XML form cannot write members besides named properties (give no "
        "\"additionalProperties\" beside \"properties\")");
  }
  const Json* properties = nullptr;
  if (auto found = f.parameters.find("properties");
      found != f.parameters.end() && found->is_object()) {
    properties = &*found;
  }
  json::Node markup = object;
  XmlMarkup(markup);
  if (object.additional >= 0) {
    // Members of any name, whose values the parser reads as strings (no schema names them).
    ASSIGN_OR_RETURN(markup.additional,
                     XmlStringValue(nodes, tries, object.additional, "(additional)"));
    markup.extra_key = XmlExtraKey(nodes);
    markup.key_open = std::string(kXmlParamOpen);
    markup.key_close = ">\n";
  }
  std::vector<std::string> keys;
  for (json::Property& p : markup.props) {
    if (!XmlNameFits(p.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter \"", p.name, "\" cannot be named in the XML form"));
    }
    keys.push_back(absl::StrCat(kXmlParamOpen, p.name, ">\n"));
    const Json* schema = nullptr;
    if (properties != nullptr) {
      if (auto found = properties->find(p.name); found != properties->end()) schema = &*found;
    }
    if (schema == nullptr || XmlParamIsString(*schema)) {
      ASSIGN_OR_RETURN(p.value, XmlStringValue(nodes, tries, p.value, p.name));
    }
  }
  markup.key_trie = json::AddTrie(tries, keys, true);
  nodes.push_back(std::move(markup));
  return static_cast<int32_t>(nodes.size() - 1);
}

// Appends the node of parameters the grammar leaves to the model in the XML form: members of
// any names (no '<', '>' or line breaks) whose values are any text, then `</function>`.
int32_t XmlFreeParameters(std::vector<json::Node>& nodes, std::vector<json::TrieNode>& tries) {
  json::Node object;
  object.kind = json::NodeKind::kObject;
  XmlMarkup(object);
  object.next_required = {0};
  object.key_trie = json::AddTrie(tries, {}, true);
  object.additional = static_cast<int32_t>(nodes.size());
  nodes.push_back(XmlRawValue(json::Node{}));
  object.extra_key = XmlExtraKey(nodes);
  object.key_open = std::string(kXmlParamOpen);
  object.key_close = ">\n";
  nodes.push_back(std::move(object));
  return static_cast<int32_t>(nodes.size() - 1);
}

// Calls in the XML form of `functions` (those whose names fit it) after `opening` (none when
// empty), then more after `again` (none when empty): `<function=NAME>\n`, the parameters (by
// their schema where `schema[i]`, else free), `</function>\n</tool_call>`. A function whose
// parameters the form cannot write has free parameters, or is InvalidArgument if strict.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> XmlCall(const std::vector<Function>& functions,
                                                           std::vector<bool> schema,
                                                           absl::string_view opening,
                                                           absl::string_view again) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> parameters =
      JsonGrammar::FromSchema(Dump(ParametersSchema(functions, schema)));
  if (!parameters.ok()) {
    // Past the grammar's bounds together (each one alone compiled): free parameters, unless a
    // function is strict.
    for (const Function& f : functions) {
      if (f.strict) {
        return absl::InvalidArgumentError(
            absl::StrCat("the functions' parameters together: ", parameters.status().message()));
      }
    }
    schema.assign(functions.size(), false);
    ASSIGN_OR_RETURN(parameters,
                     JsonGrammar::FromSchema(Dump(ParametersSchema(functions, schema))));
  }
  const json::CompiledGrammar& compiled = Compiled(**parameters);
  ASSIGN_OR_RETURN(const json::Node* root, FunctionsAlternative(compiled, functions.size()));
  json::SeqItem choice;
  choice.kind = json::SeqItem::Kind::kChoice;
  json::SeqItem arguments;
  arguments.kind = json::SeqItem::Kind::kChosenValue;
  ASSIGN_OR_RETURN(
      std::shared_ptr<const json::CompiledGrammar> extended,
      json::CompiledGrammar::Extended(
          compiled,
          [&](std::vector<json::Node>& nodes, std::vector<json::TrieNode>& tries) -> absl::Status {
            RETURN_IF_ERROR(ForbidInValues(nodes, tries,
                                           {std::string(kXmlParamClose), std::string(kCallClose)}));
            int32_t free = -1;
            for (size_t i = 0; i < functions.size(); ++i) {
              const Function& f = functions[i];
              if (!XmlNameFits(f.name)) continue;
              absl::StatusOr<int32_t> node =
                  schema[i] ? XmlParameters(nodes, tries, root->alts[i], f)
                            : absl::InvalidArgumentError("its parameters are not expressible");
              if (!node.ok() && f.strict) {
                return absl::InvalidArgumentError(
                    absl::StrCat("the parameters of strict function \"", f.name,
                                 "\": ", node.status().message()));
              }
              if (!node.ok()) {
                if (free < 0) free = XmlFreeParameters(nodes, tries);
                node = free;
              }
              choice.texts.push_back(absl::StrCat(kXmlFunctionOpen, f.name, ">\n"));
              arguments.values.push_back(*node);
            }
            if (choice.texts.empty()) {
              return absl::InvalidArgumentError(
                  "no function has a name the XML tool-call form can write (no '>', line "
                  "breaks, or whitespace at its ends)");
            }
            return absl::OkStatus();
          }));
  std::vector<json::SeqItem> items;
  if (!opening.empty()) items.push_back(json::SeqItem::Text(std::string(opening)));
  items.push_back(std::move(choice));
  items.push_back(std::move(arguments));
  items.push_back(json::SeqItem::Text(std::string(kXmlCallEnd)));
  return json::CompiledGrammar::Framed(*extended, std::move(items), std::string(again));
}

// A named function's call in the XML form, after `<function=NAME>\n`: its parameters, then
// `</function>\n</tool_call>`.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> XmlNamedCall(const Function& f, bool schema) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> parameters =
      schema ? JsonGrammar::FromSchema(Dump(f.parameters)) : JsonGrammar::AnyObject();
  if (!parameters.ok()) parameters = JsonGrammar::AnyObject();
  const json::CompiledGrammar& compiled = Compiled(**parameters);
  int32_t node = -1;
  ASSIGN_OR_RETURN(
      std::shared_ptr<const json::CompiledGrammar> extended,
      json::CompiledGrammar::Extended(
          compiled,
          [&](std::vector<json::Node>& nodes, std::vector<json::TrieNode>& tries) -> absl::Status {
            RETURN_IF_ERROR(ForbidInValues(nodes, tries,
                                           {std::string(kXmlParamClose), std::string(kCallClose)}));
            absl::StatusOr<int32_t> params =
                schema ? XmlParameters(nodes, tries, compiled.root(), f)
                       : absl::InvalidArgumentError("its parameters are not expressible");
            if (!params.ok() && f.strict) {
              return absl::InvalidArgumentError(absl::StrCat("the parameters of strict function \"",
                                                             f.name,
                                                             "\": ", params.status().message()));
            }
            node = params.ok() ? *params : XmlFreeParameters(nodes, tries);
            return absl::OkStatus();
          }));
  return json::CompiledGrammar::Framed(
      *extended, {json::SeqItem::Value(node), json::SeqItem::Text(std::string(kXmlCallEnd))});
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
                          CallTokens tokens)
      : call_(std::move(call)), index_(index), tokens_(std::move(tokens)) {}

  absl::Status Allowed(absl::Span<uint64_t> allowed) override {
    if (held_ != nullptr) return held_->Allowed(allowed);
    std::fill(allowed.begin(), allowed.end(), 0);
    if (state_ == State::kDone) {
      for (TokenId id : tokens_.end_after_call) {
        if (id >= 0 && static_cast<size_t>(id) / 64 < allowed.size()) {
          allowed[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<uint32_t>(id) % 64);
        }
      }
      return absl::OkStatus();
    }
    for (TokenId id = 0; id < index_->id_limit(); ++id) {
      if (static_cast<size_t>(id) / 64 >= allowed.size()) break;
      allowed[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<uint32_t>(id) % 64);
    }
    return absl::OkStatus();
  }
  absl::Status Accept(TokenId token) override {
    switch (state_) {
      case State::kFree:
        // Held from the token after the opening; end ids never end a held call.
        if (token == tokens_.open) {
          state_ = State::kInCall;
          if (call_ != nullptr) held_ = JsonConstraint::Create(call_, index_, {});
        }
        return absl::OkStatus();
      case State::kInCall:
        if (held_ != nullptr) {
          RETURN_IF_ERROR(held_->Accept(token));
          if (!held_->Complete()) return absl::OkStatus();
          held_.reset();
        } else if (token != tokens_.close) {
          return absl::OkStatus();
        }
        state_ = tokens_.end_after_call.empty() ? State::kFree : State::kDone;
        return absl::OkStatus();
      case State::kDone:
        if (std::find(tokens_.end_after_call.begin(), tokens_.end_after_call.end(), token) ==
            tokens_.end_after_call.end()) {
          return absl::FailedPreconditionError(
              absl::StrCat("tool calls: token ", token, " after the one call the request allows"));
        }
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }
  bool Complete() const override { return state_ != State::kInCall; }
  bool Unconstrained() const override {
    return state_ == State::kFree || (state_ == State::kInCall && held_ == nullptr);
  }

 private:
  enum class State { kFree, kInCall, kDone };
  const std::shared_ptr<const JsonGrammar> call_;
  const TokenIndex* const index_;
  const CallTokens tokens_;
  State state_ = State::kFree;
  std::unique_ptr<JsonConstraint> held_;  // The call under way, where a grammar holds it.
};

// ForcedToolCallGrammar for the XML form.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> XmlForced(const std::vector<Function>& functions,
                                                             std::string_view function,
                                                             absl::string_view again) {
  const std::vector<bool> expressible = Expressible(functions);
  if (!function.empty()) {
    for (size_t i = 0; i < functions.size(); ++i) {
      if (functions[i].name != function) continue;
      if (!expressible[i]) RETURN_IF_ERROR(Arguments(functions[i]).status());  // Strict.
      return XmlNamedCall(functions[i], expressible[i]);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("the request's tools define no function \"",
                     absl::string_view(function.data(), function.size()), "\""));
  }
  for (size_t i = 0; i < functions.size(); ++i) {
    if (!expressible[i]) RETURN_IF_ERROR(Arguments(functions[i]).status());  // Strict ones.
  }
  return XmlCall(functions, expressible, "", again);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const JsonGrammar>> ForcedToolCallGrammar(
    const nlohmann::ordered_json& tools, std::string_view function, ToolCallMarkup markup,
    bool single) {
  const std::vector<Function> functions = Functions(tools);
  if (functions.empty()) {
    return absl::InvalidArgumentError("a forced tool call needs functions, and tools have none");
  }
  const absl::string_view again = single ? "" : kNextCall;
  if (markup == ToolCallMarkup::kXml) return XmlForced(functions, function, again);
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
      AnyCall(functions, expressible, "", again);
  if (call.ok()) return call;
  // Past the grammar's bounds together (each one alone compiled): the names alone.
  for (const Function& f : functions) {
    if (f.strict) {
      return absl::InvalidArgumentError(
          absl::StrCat("the functions' parameters together: ", call.status().message()));
    }
  }
  return AnyCall(functions, std::vector<bool>(functions.size(), false), "", again);
}

absl::StatusOr<std::shared_ptr<const JsonGrammar>> StrictToolCallGrammar(
    const nlohmann::ordered_json& tools, ToolCallMarkup markup) {
  const std::vector<Function> functions = Functions(tools);
  std::vector<bool> schema = Expressible(functions);
  bool any_strict = false;
  for (size_t i = 0; i < functions.size(); ++i) {
    any_strict |= functions[i].strict;
    schema[i] = schema[i] && functions[i].strict;
  }
  if (!any_strict) return nullptr;
  if (markup == ToolCallMarkup::kXml) {
    // A strict function the form cannot write refuses the request; others are free.
    for (size_t i = 0; i < functions.size(); ++i) {
      if (functions[i].strict && !schema[i]) RETURN_IF_ERROR(Arguments(functions[i]).status());
    }
    return XmlCall(functions, schema, "\n", "");
  }
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> call = AnyCall(functions, schema, "\n", "");
  if (call.ok()) return call;
  return AnyCall(functions, std::vector<bool>(functions.size(), false), "\n", "");
}

std::unique_ptr<JsonConstraint> TriggeredConstraint(std::shared_ptr<const JsonGrammar> call,
                                                    const TokenIndex* index, CallTokens tokens) {
  return std::make_unique<TriggeredJsonConstraint>(std::move(call), index, std::move(tokens));
}

}  // namespace cairn::infer::text
