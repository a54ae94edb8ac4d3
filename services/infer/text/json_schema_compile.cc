// JsonGrammar::FromSchema and AnyObject: a JSON Schema document compiled into the node graph of
// json_grammar.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/json/json_scan.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_pattern.h"

namespace cairn::infer::text {
namespace json {
namespace {

// Ordered, so that properties keep the schema's order.
using Json = nlohmann::ordered_json;

// "discriminator" (OpenAPI, pydantic's discriminated unions) only names the property that tells
// the oneOf's alternatives apart; the alternatives themselves still constrain the value.
constexpr std::string_view kAnnotations[] = {
    "title",        "description", "default",    "examples",    "example",          "$schema",
    "$id",          "$comment",    "deprecated", "readOnly",    "writeOnly",        "strict",
    "nullable",     "$anchor",     "$defs",      "definitions", "contentMediaType", "$vocabulary",
    "discriminator"};

// Keywords that narrow values and are not implemented: refused rather than ignored.
constexpr std::string_view kRefused[] = {"multipleOf",
                                         "uniqueItems",
                                         "not",
                                         "if",
                                         "then",
                                         "else",
                                         "patternProperties",
                                         "propertyNames",
                                         "dependentRequired",
                                         "dependentSchemas",
                                         "dependencies",
                                         "contains",
                                         "minContains",
                                         "maxContains",
                                         "unevaluatedProperties",
                                         "unevaluatedItems",
                                         "minProperties",
                                         "maxProperties",
                                         "additionalItems",
                                         "$dynamicRef",
                                         "$recursiveRef",
                                         "contentEncoding",
                                         "contentSchema"};

// Formats that constrain a string's text and are not implemented (json_pattern.cc has those
// that are): refused rather than ignored. Any other format is an annotation, as JSON Schema
// 2020-12 makes formats by default, and as the descriptive ones are ("password" for pydantic's
// SecretStr, "binary" for bytes, "path"): they say what a string means, not what it may hold.
constexpr std::string_view kRefusedFormats[] = {
    // JSON Schema's own.
    "idn-email", "idn-hostname", "uri-template",
    "regex",
    // OpenAPI's base64.
    "byte",
    // pydantic's types that check their text.
    "name-email", "ipvanyaddress", "ipvanyinterface", "ipvanynetwork", "ipv4network", "ipv6network",
    "ipv4interface", "ipv6interface", "multi-host-uri", "json-string", "base64", "base64url"};

template <size_t N>
bool In(const std::string_view (&list)[N], std::string_view key) {
  return std::find(std::begin(list), std::end(list), key) != std::end(list);
}

std::string PointerToken(std::string_view key) {
  return absl::StrReplaceAll(std::string(key), {{"~", "~0"}, {"/", "~1"}});
}

std::string ShownPath(const std::string& path) { return path.empty() ? "/" : path; }

// The compact serialisation of `v` (invalid UTF-8 cannot occur: the parser refused it).
std::string Compact(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::Status Unsupported(std::string_view keyword, const std::string& path,
                         std::string_view why = "is not supported") {
  return absl::InvalidArgumentError(absl::StrCat("schema keyword \"", std::string(keyword),
                                                 "\" at ", ShownPath(path), " ", std::string(why)));
}

// Compiles one schema document. Single use.
class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json* document) : document_(document) {}

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> Run() {
    ASSIGN_OR_RETURN(int32_t root, Ref("#", "", 0));
    return Finish(root);
  }

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> RunAnyObject() {
    ASSIGN_OR_RETURN(int32_t any, AnyValue());
    ASSIGN_OR_RETURN(int32_t root, NewNode(NodeKind::kObject, ""));
    ASSIGN_OR_RETURN(int32_t key, NewNode(NodeKind::kString, ""));
    nodes_[root].additional = any;
    nodes_[root].extra_key = key;
    nodes_[root].key_trie = AddTrie({}, false);
    nodes_[root].next_required = {0};
    return Finish(root);
  }

 private:
  absl::StatusOr<int32_t> NewNode(NodeKind kind, const std::string& path) {
    if (nodes_.size() >= static_cast<size_t>(kMaxGrammarNodes)) {
      return absl::InvalidArgumentError(absl::StrCat("schema at ", ShownPath(path),
                                                     " compiles to more than ", kMaxGrammarNodes,
                                                     " grammar nodes"));
    }
    nodes_.emplace_back();
    nodes_.back().kind = kind;
    nodes_.back().path = path;
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  int32_t AddTrie(const std::vector<std::string>& literals, bool track_below) {
    return json::AddTrie(tries_, literals, track_below);
  }

  absl::StatusOr<int32_t> Literals(const std::vector<std::string>& literals,
                                   const std::string& path) {
    ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kLiteral, path));
    nodes_[n].trie = AddTrie(literals, false);
    return n;
  }

  // The node for any JSON value, built once.
  absl::StatusOr<int32_t> AnyValue() {
    if (any_ >= 0) return any_;
    ASSIGN_OR_RETURN(any_, NewNode(NodeKind::kAlt, ""));
    ASSIGN_OR_RETURN(int32_t lit, Literals({"null", "true", "false"}, ""));
    ASSIGN_OR_RETURN(int32_t num, NewNode(NodeKind::kNumber, ""));
    ASSIGN_OR_RETURN(int32_t str, NewNode(NodeKind::kString, ""));
    ASSIGN_OR_RETURN(int32_t arr, NewNode(NodeKind::kArray, ""));
    nodes_[arr].items = any_;
    ASSIGN_OR_RETURN(int32_t key, NewNode(NodeKind::kString, ""));
    ASSIGN_OR_RETURN(int32_t obj, NewNode(NodeKind::kObject, ""));
    nodes_[obj].additional = any_;
    nodes_[obj].extra_key = key;
    nodes_[obj].key_trie = AddTrie({}, false);
    nodes_[obj].next_required = {0};
    nodes_[any_].alts = {lit, num, str, arr, obj};
    return any_;
  }

  absl::StatusOr<int32_t> Never(const std::string& path) { return NewNode(NodeKind::kAlt, path); }

  // Resolves `ref` ("#", "#/$defs/NAME" or "#/definitions/NAME") to an alias node, compiling
  // its target the first time (at `depth`: chains of references count as nesting).
  absl::StatusOr<int32_t> Ref(const std::string& ref, const std::string& path, int depth) {
    auto found = refs_.find(ref);
    if (found != refs_.end()) return found->second;
    const Json* target = nullptr;
    std::string target_path;
    if (ref == "#") {
      target = document_;
    } else {
      for (std::string_view section : {"#/$defs/", "#/definitions/"}) {
        if (ref.rfind(section, 0) != 0) continue;
        std::string name = ref.substr(section.size());
        if (name.find('/') != std::string::npos) break;
        name = absl::StrReplaceAll(name, {{"~1", "/"}, {"~0", "~"}});
        const std::string key(section.substr(2, section.size() - 3));
        auto defs = document_->find(key);
        if (defs == document_->end() || !defs->is_object()) break;
        auto def = defs->find(name);
        if (def == defs->end()) break;
        target = &*def;
        target_path = absl::StrCat("/", key, "/", PointerToken(name));
      }
    }
    if (target == nullptr) {
      return Unsupported("$ref", path,
                         absl::StrCat("to \"", ref,
                                      "\" is not supported (only \"#\", "
                                      "\"#/$defs/NAME\" and \"#/definitions/NAME\" that exist)"));
    }
    ASSIGN_OR_RETURN(int32_t alias, NewNode(NodeKind::kAlt, target_path));
    refs_[ref] = alias;
    ASSIGN_OR_RETURN(int32_t body, Compile(*target, target_path, depth + 1));
    nodes_[alias].alts = {body};
    return alias;
  }

  absl::StatusOr<int32_t> NonNegative(const Json& s, std::string_view key, const std::string& path,
                                      int64_t fallback) {
    auto it = s.find(std::string(key));
    if (it == s.end()) return static_cast<int32_t>(fallback);
    if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
      return static_cast<int32_t>(std::min<uint64_t>(it->get<uint64_t>(), kUnreachable));
    }
    if (it->is_number_float()) {
      const double d = it->get<double>();
      if (d >= 0 && d == static_cast<double>(static_cast<int64_t>(std::min(d, 1e15)))) {
        return static_cast<int32_t>(std::min<double>(d, kUnreachable));
      }
    }
    return Unsupported(key, path, "is not a non-negative integer");
  }

  // Applies `s`'s minimum, maximum, exclusiveMinimum and exclusiveMaximum to number node
  // `node` where a sign and a count of digits express them soundly: for integers a lower bound
  // of at most 1 (-(10^d - 1) or below allows d-digit negatives; 0 no sign; 1 no sign and no
  // zero) and an upper bound of at least 9 (at most d digits where 10^d - 1 fits), such as zod's
  // safe-integer bounds or pydantic's ge=0 / gt=0; for other numbers only minimum 0. Other
  // bounds are InvalidArgument, never ignored.
  absl::Status NumberBounds(const Json& s, const std::string& path, Node& node) {
    constexpr double kLimit = 1e18;  // Past 18 digits a bound no longer narrows.
    double lo = -kLimit, hi = kLimit;
    std::string_view lo_key, hi_key;
    for (std::string_view key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      auto it = s.find(std::string(key));
      if (it == s.end()) continue;
      if (!it->is_number()) return Unsupported(key, path, "is not a number");
      const double v = std::clamp(it->get<double>(), -kLimit, kLimit);
      if (!node.integer && !(key == "minimum" && v == 0)) {
        return Unsupported(key, path, "is supported on numbers only as minimum 0");
      }
      if (key == "minimum" || key == "exclusiveMinimum") {
        const double b = key == "minimum" ? std::ceil(v) : std::floor(v) + 1;
        if (b > lo) {
          lo = b;
          lo_key = key;
        }
      } else {
        const double b = key == "maximum" ? std::floor(v) : std::ceil(v) - 1;
        if (b < hi) {
          hi = b;
          hi_key = key;
        }
      }
    }
    if (lo_key.empty() && hi_key.empty()) return absl::OkStatus();
    auto digits_within = [](double bound) {  // The most digits d with 10^d - 1 <= bound.
      int d = 0;
      for (double p = 10; d < kMaxIntegerDigits && p - 1 <= bound; p *= 10) ++d;
      return d;
    };
    if (hi < 9) return Unsupported(hi_key, path, "below 9 is not supported");
    if (lo > 1) return Unsupported(lo_key, path, "above 1 is not supported");
    node.max_digits = digits_within(hi);
    if (lo <= -9) {
      node.max_digits = std::min(node.max_digits, digits_within(-lo));
    } else {
      node.no_minus = true;
      node.no_zero = lo > 0;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int32_t> Compile(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaNesting) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema at ", ShownPath(path), " nests deeper than ", kMaxSchemaNesting));
    }
    if (s.is_boolean()) return s.get<bool>() ? AnyValue() : Never(path);
    if (!s.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema at ", ShownPath(path), " is not an object or a boolean"));
    }
    std::vector<std::string> narrowing;  // Keywords present that constrain values.
    for (const auto& [key, value] : s.items()) {
      if (In(kRefused, key)) return Unsupported(key, path);
      if (!In(kAnnotations, key)) narrowing.push_back(key);
    }
    auto only = [&](std::initializer_list<std::string_view> allowed,
                    std::string_view keyword) -> absl::Status {
      for (const std::string& k : narrowing) {
        if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
          return Unsupported(keyword, path,
                             absl::StrCat("with sibling keyword \"", k, "\" is not supported"));
        }
      }
      return absl::OkStatus();
    };
    if (s.contains("$ref")) {
      RETURN_IF_ERROR(only({"$ref"}, "$ref"));
      const Json& ref = s["$ref"];
      if (!ref.is_string()) return Unsupported("$ref", path, "is not a string");
      return Ref(ref.get<std::string>(), path, depth);
    }
    if (s.contains("allOf")) {
      RETURN_IF_ERROR(only({"allOf"}, "allOf"));
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return Unsupported("allOf", path, "with other than one schema is not supported");
      }
      return Compile(all[0], path + "/allOf/0", depth + 1);
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!s.contains(keyword)) continue;
      RETURN_IF_ERROR(only({keyword}, keyword));
      const Json& list = s[std::string(keyword)];
      if (!list.is_array() || list.empty()) {
        return Unsupported(keyword, path, "is not a non-empty array");
      }
      std::vector<int32_t> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        ASSIGN_OR_RETURN(int32_t alt,
                         Compile(list[i], absl::StrCat(path, "/", keyword, "/", i), depth + 1));
        alts.push_back(alt);
      }
      ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kAlt, path));
      nodes_[n].alts = std::move(alts);
      return n;
    }

    // The types allowed, each constrained by the keywords that apply to it.
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      std::vector<const Json*> names;
      if (t->is_array()) {
        for (const Json& e : *t) names.push_back(&e);
      } else {
        names.push_back(&*t);
      }
      for (const Json* name : names) {
        static constexpr std::string_view kTypes[] = {"null",   "boolean", "object", "array",
                                                      "number", "integer", "string"};
        if (!name->is_string() || !In(kTypes, name->get<std::string>())) {
          return Unsupported("type", path, "names a type that is not a JSON Schema type");
        }
        types.push_back(name->get<std::string>());
      }
    } else {
      types = {"null", "boolean", "object", "array", "number", "string"};
    }
    auto has_type = [&](std::string_view type) {
      return std::find(types.begin(), types.end(), type) != types.end();
    };

    for (std::string_view keyword : {"enum", "const"}) {
      if (!s.contains(keyword)) continue;
      RETURN_IF_ERROR(only({keyword, "type"}, keyword));
      const Json& given = s[std::string(keyword)];
      if (keyword == "enum" && !given.is_array()) {
        return Unsupported("enum", path, "is not an array");
      }
      std::vector<std::string> literals;
      auto add = [&](const Json& v) {
        const bool fits = has_type(v.is_null()           ? "null"
                                   : v.is_boolean()      ? "boolean"
                                   : v.is_object()       ? "object"
                                   : v.is_array()        ? "array"
                                   : v.is_string()       ? "string"
                                   : v.is_number_float() ? "number"
                                                         : "integer") ||
                          (v.is_number() && has_type("number"));
        if (fits) literals.push_back(Compact(v));
      };
      if (keyword == "enum") {
        for (const Json& v : given) add(v);
      } else {
        add(given);
      }
      return Literals(literals, path);
    }

    std::vector<int32_t> alts;
    if (has_type("null")) {
      ASSIGN_OR_RETURN(int32_t n, Literals({"null"}, path));
      alts.push_back(n);
    }
    if (has_type("boolean")) {
      ASSIGN_OR_RETURN(int32_t n, Literals({"true", "false"}, path));
      alts.push_back(n);
    }
    const Json* format = nullptr;
    if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) return Unsupported("format", path, "is not a string");
      format = &*f;
    }
    if (has_type("number") || has_type("integer")) {
      ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kNumber, path));
      nodes_[n].integer = !has_type("number");
      RETURN_IF_ERROR(NumberBounds(s, path, nodes_[n]));
      // OpenAPI's int32: 9 digits stay inside it ("int64" holds every integer generated).
      if (format != nullptr && *format == "int32") {
        nodes_[n].max_digits = std::min(nodes_[n].max_digits, 9);
      }
      alts.push_back(n);
    }
    if (has_type("string")) {
      ASSIGN_OR_RETURN(int32_t n, CompileString(s, path, format));
      alts.push_back(n);
    }
    if (has_type("array")) {
      ASSIGN_OR_RETURN(int32_t n, CompileArray(s, path, depth));
      alts.push_back(n);
    }
    if (has_type("object")) {
      ASSIGN_OR_RETURN(int32_t n, CompileObject(s, path, depth));
      alts.push_back(n);
    }
    if (alts.size() == 1) return alts[0];
    ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kAlt, path));
    nodes_[n].alts = std::move(alts);
    return n;
  }

  // A string node: minLength, maxLength, pattern and format (`format` may be null).
  absl::StatusOr<int32_t> CompileString(const Json& s, const std::string& path,
                                        const Json* format) {
    ASSIGN_OR_RETURN(int32_t min, NonNegative(s, "minLength", path, 0));
    ASSIGN_OR_RETURN(int32_t max, NonNegative(s, "maxLength", path, -1));
    if (min > kMaxMinLength) return Unsupported("minLength", path, "is too large");
    const Json* pattern = nullptr;
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) return Unsupported("pattern", path, "is not a string");
      pattern = &*p;
    }
    const StringFormat* known = nullptr;
    if (format != nullptr) {
      const std::string name = format->get<std::string>();
      known = FindStringFormat(name);
      if (known == nullptr && In(kRefusedFormats, name)) {
        return Unsupported("format", path, absl::StrCat("is not supported as \"", name, "\""));
      }
      if (known != nullptr && known->max_length >= 0) {
        max = max < 0 ? known->max_length : std::min(max, known->max_length);
      }
    }
    ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kString, path));
    nodes_[n].min_length = min;
    nodes_[n].max_length = max;
    if (pattern == nullptr && known == nullptr) return n;

    // Strings of the same patterns share one automaton; its length table grows to the largest
    // minLength beside them.
    const std::string key =
        absl::StrCat(pattern != nullptr ? pattern->get<std::string>() : std::string(), "\n",
                     known != nullptr ? std::string(known->name) : "");
    auto [it, added] = pattern_ids_.try_emplace(key, static_cast<int32_t>(patterns_.size()));
    if (added) {
      absl::StatusOr<PatternAutomaton> automaton = CompilePatterns(pattern, known, path);
      if (!automaton.ok()) {
        pattern_ids_.erase(it);
        return automaton.status();
      }
      patterns_.push_back(*std::move(automaton));
    }
    PatternAutomaton& automaton = patterns_[static_cast<size_t>(it->second)];
    if (min > automaton.max_min_length()) {
      const int64_t entries =
          static_cast<int64_t>(automaton.state_count()) * (min - automaton.max_min_length());
      length_table_left_ -= entries;
      if (length_table_left_ < 0) {
        return Unsupported("minLength", path,
                           absl::StrCat("beside ", pattern != nullptr ? "pattern" : "format",
                                        " is not supported: the schema's patterns would need "
                                        "length tables of more than ",
                                        kMaxPatternLengthTable, " entries"));
      }
      automaton.ExtendLengthTable(min);
    }
    nodes_[n].pattern = it->second;
    return n;
  }

  // Compiles a string's `pattern` (may be null) and implemented format (may be null).
  absl::StatusOr<PatternAutomaton> CompilePatterns(const Json* pattern, const StringFormat* known,
                                                   const std::string& path) {
    PatternCompiler compiler(&pattern_budget_);
    if (pattern != nullptr) {
      absl::Status added = compiler.Add(pattern->get<std::string>());
      if (!added.ok()) {
        return Unsupported("pattern", path, absl::StrCat("is not supported: ", added.message()));
      }
    }
    if (known != nullptr) {
      absl::Status added = compiler.Add(known->pattern);
      if (!added.ok()) {
        return absl::InternalError(absl::StrCat("format \"", std::string(known->name),
                                                "\" does not compile: ", added.message()));
      }
    }
    absl::StatusOr<PatternAutomaton> automaton = compiler.Compile();
    if (!automaton.ok()) {
      return Unsupported(pattern != nullptr ? "pattern" : "format", path,
                         absl::StrCat("is not supported: ", automaton.status().message()));
    }
    length_table_left_ -= automaton->state_count();
    return automaton;
  }

  absl::StatusOr<int32_t> CompileArray(const Json& s, const std::string& path, int depth) {
    std::vector<int32_t> prefix;
    int32_t items = -2;  // -2: not given.
    auto compile_list = [&](const Json& list, const char* key) -> absl::Status {
      if (!list.is_array()) return Unsupported(key, path, "is not an array");
      if (list.size() > static_cast<size_t>(kMaxMinItems)) {
        return Unsupported(key, path, "has too many schemas");
      }
      for (size_t i = 0; i < list.size(); ++i) {
        ASSIGN_OR_RETURN(int32_t item,
                         Compile(list[i], absl::StrCat(path, "/", key, "/", i), depth + 1));
        prefix.push_back(item);
      }
      return absl::OkStatus();
    };
    if (auto p = s.find("prefixItems"); p != s.end()) {
      RETURN_IF_ERROR(compile_list(*p, "prefixItems"));
    }
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {  // Draft 7's tuple form: prefixItems.
        if (s.contains("prefixItems")) {
          return Unsupported("items", path, "as an array beside prefixItems is not supported");
        }
        RETURN_IF_ERROR(compile_list(*it, "items"));
      } else if (it->is_boolean() && !it->get<bool>()) {
        items = -1;
      } else {
        ASSIGN_OR_RETURN(items, Compile(*it, path + "/items", depth + 1));
      }
    }
    if (items == -2) {
      // Absent: any items; after prefixItems none (a narrowing, like additionalProperties).
      if (prefix.empty()) {
        ASSIGN_OR_RETURN(items, AnyValue());
      } else {
        items = -1;
      }
    }
    ASSIGN_OR_RETURN(int32_t min, NonNegative(s, "minItems", path, 0));
    ASSIGN_OR_RETURN(int32_t max, NonNegative(s, "maxItems", path, -1));
    if (min > kMaxMinItems) return Unsupported("minItems", path, "is too large");
    ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kArray, path));
    Node& node = nodes_[n];
    node.prefix = std::move(prefix);
    node.items = items;
    node.min_items = min;
    node.max_items = max;
    node.count_cap =
        max >= 0 ? max : std::max<int32_t>(min, static_cast<int32_t>(node.prefix.size()));
    return n;
  }

  absl::StatusOr<int32_t> CompileObject(const Json& s, const std::string& path, int depth) {
    std::vector<Property> props;
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return Unsupported("properties", path, "is not an object");
      if (p->size() > static_cast<size_t>(kMaxProperties)) {
        return Unsupported("properties", path, "has too many properties");
      }
      for (const auto& [name, schema] : p->items()) {
        ASSIGN_OR_RETURN(
            int32_t value,
            Compile(schema, absl::StrCat(path, "/properties/", PointerToken(name)), depth + 1));
        props.push_back({name, value, false});
      }
    }
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return Unsupported("required", path, "is not an array");
      for (const Json& name : *r) {
        if (!name.is_string()) return Unsupported("required", path, "lists a non-string");
        auto it = std::find_if(props.begin(), props.end(), [&](const Property& p) {
          return p.name == name.get<std::string>();
        });
        if (it == props.end()) {
          return absl::InvalidArgumentError(absl::StrCat("required property \"",
                                                         name.get<std::string>(), "\" at ", path,
                                                         "/required is not in properties"));
        }
        it->required = true;
      }
    }
    // Absent additionalProperties: none when `properties` names some (the model writes the
    // named ones only, as strict structured outputs do), any otherwise ({"type": "object"}).
    int32_t additional = -1;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (!(a->is_boolean() && !a->get<bool>())) {
        ASSIGN_OR_RETURN(additional, Compile(*a, path + "/additionalProperties", depth + 1));
      }
    } else if (!s.contains("properties")) {
      ASSIGN_OR_RETURN(additional, AnyValue());
    }
    std::vector<std::string> quoted, raw;
    for (const Property& p : props) {
      quoted.push_back(Compact(Json(p.name)));
      raw.push_back(p.name);
    }
    int32_t key = -1;
    if (additional >= 0) {
      ASSIGN_OR_RETURN(key, NewNode(NodeKind::kString, path + "/additionalProperties"));
      if (!props.empty()) nodes_[key].exclude_trie = AddTrie(raw, false);
    }
    ASSIGN_OR_RETURN(int32_t n, NewNode(NodeKind::kObject, path));
    Node& node = nodes_[n];
    node.key_trie = AddTrie(quoted, true);
    node.additional = additional;
    node.extra_key = key;
    node.next_required.assign(props.size() + 1, static_cast<int32_t>(props.size()));
    for (size_t i = props.size(); i-- > 0;) {
      node.next_required[i] =
          props[i].required ? static_cast<int32_t>(i) : node.next_required[i + 1];
    }
    node.props = std::move(props);
    return n;
  }

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> Finish(int32_t root) {
    RETURN_IF_ERROR(AnalyzeGrammar(nodes_, tries_, patterns_, root));
    return std::shared_ptr<const JsonGrammar>(std::make_shared<CompiledGrammar>(
        std::move(nodes_), std::move(tries_), std::move(patterns_), root));
  }

  const Json* document_;
  std::vector<Node> nodes_;
  std::vector<TrieNode> tries_;
  std::vector<PatternAutomaton> patterns_;
  absl::flat_hash_map<std::string, int32_t> pattern_ids_;  // Key: the pattern, the format.
  PatternBudget pattern_budget_{kMaxPatternStatesPerSchema, kMaxPatternStepsPerSchema};
  int64_t length_table_left_ = kMaxPatternLengthTable;
  absl::flat_hash_map<std::string, int32_t> refs_;
  int32_t any_ = -1;
};

}  // namespace
}  // namespace json

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyObject() {
  json::SchemaCompiler compiler(nullptr);
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> grammar = compiler.RunAnyObject();
  CAIRN_CHECK(grammar.ok());
  return *std::move(grammar);
}

absl::StatusOr<std::shared_ptr<const JsonGrammar>> JsonGrammar::FromSchema(
    std::string_view schema_json) {
  if (schema_json.size() > json::kMaxSchemaBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema is larger than ", json::kMaxSchemaBytes, " bytes"));
  }
  const absl::string_view text(schema_json.data(), schema_json.size());
  if (JsonNestingDepth(text, json::kMaxSchemaNesting) > json::kMaxSchemaNesting) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema nests deeper than ", json::kMaxSchemaNesting));
  }
  // The ordered parse below is quadratic in an object's members (common/json/json_scan.h).
  if (LargestJsonObjectMembers(text) > kMaxOrderedJsonObjectMembers) {
    return absl::InvalidArgumentError(absl::StrCat("schema has an object of more than ",
                                                   kMaxOrderedJsonObjectMembers, " members"));
  }
  json::Json document = json::Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return absl::InvalidArgumentError("schema is not valid JSON");
  json::SchemaCompiler compiler(&document);
  return compiler.Run();
}

}  // namespace cairn::infer::text
