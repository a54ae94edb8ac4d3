#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_JSON_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_JSON_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"

// Helpers for the JSON constraint tests: an independent validator for the schema subset the
// grammar supports, and a greedy completer that shows a matcher state can still end.
namespace cairn::infer::text::testing {

using OrderedJson = nlohmann::ordered_json;

inline const json::CompiledGrammar* Compiled(const std::shared_ptr<const JsonGrammar>& g) {
  return static_cast<const json::CompiledGrammar*>(g.get());
}

inline int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Returns whether `v` is valid under `schema` (the subset JsonGrammar::FromSchema compiles;
// additionalProperties absent counts as false beside `properties`, as the grammar generates).
// `root` resolves $ref.
inline bool Validate(const OrderedJson& v, const OrderedJson& schema, const OrderedJson& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"].get<std::string>();
    if (ref == "#") return Validate(v, root, root);
    for (const char* section : {"$defs", "definitions"}) {
      const std::string prefix = std::string("#/") + section + "/";
      if (ref.rfind(prefix, 0) == 0) {
        return Validate(v, root[section][ref.substr(prefix.size())], root);
      }
    }
    return false;
  }
  if (schema.contains("allOf")) return Validate(v, schema["allOf"][0], root);
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    for (const OrderedJson& alt : schema[key]) {
      if (Validate(v, alt, root)) return true;
    }
    return false;
  }
  if (schema.contains("type")) {
    OrderedJson types =
        schema["type"].is_array() ? schema["type"] : OrderedJson::array({schema["type"]});
    bool fits = false;
    for (const OrderedJson& t : types) {
      const std::string name = t.get<std::string>();
      fits |= (name == "null" && v.is_null()) || (name == "boolean" && v.is_boolean()) ||
              (name == "object" && v.is_object()) || (name == "array" && v.is_array()) ||
              (name == "string" && v.is_string()) || (name == "number" && v.is_number()) ||
              (name == "integer" && v.is_number_integer());
    }
    if (!fits) return false;
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const OrderedJson& e : schema["enum"]) found |= e == v;
    if (!found) return false;
  }
  if (schema.contains("const") && schema["const"] != v) return false;
  if (v.is_string()) {
    const int64_t n = CodePoints(v.get<std::string>());
    if (schema.contains("minLength") && n < schema["minLength"].get<int64_t>()) return false;
    if (schema.contains("maxLength") && n > schema["maxLength"].get<int64_t>()) return false;
  }
  if (v.is_array()) {
    const int64_t n = static_cast<int64_t>(v.size());
    if (schema.contains("minItems") && n < schema["minItems"].get<int64_t>()) return false;
    if (schema.contains("maxItems") && n > schema["maxItems"].get<int64_t>()) return false;
    size_t prefix = 0;
    if (schema.contains("prefixItems")) {
      prefix = schema["prefixItems"].size();
      for (size_t i = 0; i < v.size() && i < prefix; ++i) {
        if (!Validate(v[i], schema["prefixItems"][i], root)) return false;
      }
    }
    for (size_t i = prefix; i < v.size(); ++i) {
      if (schema.contains("items")) {
        if (!Validate(v[i], schema["items"], root)) return false;
      } else if (prefix > 0) {
        return false;
      }
    }
  }
  if (v.is_object()) {
    const OrderedJson props = schema.value("properties", OrderedJson::object());
    if (schema.contains("required")) {
      for (const OrderedJson& r : schema["required"]) {
        if (!v.contains(r.get<std::string>())) return false;
      }
    }
    for (const auto& [key, value] : v.items()) {
      if (props.contains(key)) {
        if (!Validate(value, props[key], root)) return false;
      } else if (schema.contains("additionalProperties")) {
        if (!Validate(value, schema["additionalProperties"], root)) return false;
      } else if (schema.contains("properties")) {
        return false;
      }
    }
  }
  return true;
}

// Appends to `out` bytes that complete `m` to one value, chosen greedily (closing bytes first);
// returns false when none is found within `limit` bytes.
inline bool CompleteGreedily(json::ByteMatcher m, std::string* out, int limit = 4000) {
  static constexpr std::string_view kPreferred = "\"}]0:n";
  for (int i = 0; i < limit; ++i) {
    if (m.Complete()) return true;
    bool moved = false;
    for (char c : kPreferred) {
      json::ByteMatcher next = m;
      if (next.Advance(static_cast<uint8_t>(c))) {
        m = next;
        *out += c;
        moved = true;
        break;
      }
    }
    for (int b = 0; b < 256 && !moved; ++b) {
      json::ByteMatcher next = m;
      if (next.Advance(static_cast<uint8_t>(b))) {
        m = next;
        *out += static_cast<char>(b);
        moved = true;
      }
    }
    if (!moved) return false;
  }
  return m.Complete();
}

}  // namespace cairn::infer::text::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_JSON_TEST_UTIL_H_
