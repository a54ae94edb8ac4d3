#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_JSON_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_JSON_TEST_UTIL_H_

#include <arpa/inet.h>

#include <cctype>
#include <climits>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/unicode.h"
#include "tests/unit/services/infer/text/ecma_regex_reference.h"

// Helpers for the JSON constraint tests: an independent validator for the schema subset the
// grammar supports (formats checked by hand-written references, patterns by std::regex), and
// completers that show a matcher state can still end.
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

// References for the formats, written by hand from their RFCs (independent of json_pattern.cc).

inline bool IsDigits(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

inline int DecimalAt(std::string_view s, size_t at, size_t n) {
  int v = 0;
  for (size_t i = at; i < at + n; ++i) v = v * 10 + (s[i] - '0');
  return v;
}

// RFC 3339's full-date.
inline bool ValidDate(std::string_view s) {
  if (s.size() != 10 || !IsDigits(s, 0, 4) || s[4] != '-' || !IsDigits(s, 5, 2) || s[7] != '-' ||
      !IsDigits(s, 8, 2)) {
    return false;
  }
  const int y = DecimalAt(s, 0, 4), m = DecimalAt(s, 5, 2), d = DecimalAt(s, 8, 2);
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1];
}

// RFC 3339's full-time: a leap second wherever it is 23:59:60 in UTC.
inline bool ValidTime(std::string_view s) {
  if (s.size() < 9 || !IsDigits(s, 0, 2) || s[2] != ':' || !IsDigits(s, 3, 2) || s[5] != ':' ||
      !IsDigits(s, 6, 2)) {
    return false;
  }
  const int h = DecimalAt(s, 0, 2), m = DecimalAt(s, 3, 2), sec = DecimalAt(s, 6, 2);
  size_t i = 8;
  if (s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i + 1) return false;
    i = j;
  }
  int offset = 0;
  if (i + 1 == s.size() && (s[i] == 'Z' || s[i] == 'z')) {
  } else if (i + 6 == s.size() && (s[i] == '+' || s[i] == '-') && IsDigits(s, i + 1, 2) &&
             s[i + 3] == ':' && IsDigits(s, i + 4, 2)) {
    const int oh = DecimalAt(s, i + 1, 2), om = DecimalAt(s, i + 4, 2);
    if (oh > 23 || om > 59) return false;
    offset = (s[i] == '+' ? 1 : -1) * (oh * 60 + om);
  } else {
    return false;
  }
  if (h > 23 || m > 59 || sec > 60) return false;
  const int utc = ((h * 60 + m - offset) % 1440 + 1440) % 1440;
  return sec < 60 || utc == 23 * 60 + 59;
}

inline bool ValidDateTime(std::string_view s) {
  return s.size() > 11 && (s[10] == 'T' || s[10] == 't') && ValidDate(s.substr(0, 10)) &&
         ValidTime(s.substr(11));
}

// RFC 3339 Appendix A: P, then Y[M[D]] or M[D] or D, then optionally T with H[M[S]] or M[S]
// or S; or P and weeks alone.
inline bool ValidDuration(std::string_view s) {
  if (s.size() < 3 || s[0] != 'P') return false;
  std::vector<std::pair<bool, char>> units;  // (after T, designator)
  bool time = false;
  for (size_t i = 1; i < s.size();) {
    if (s[i] == 'T') {
      if (time) return false;
      time = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || j == s.size()) return false;
    units.push_back({time, s[j]});
    i = j + 1;
  }
  std::string date, clock;
  for (const auto& [t, c] : units) (t ? clock : date) += c;
  if (time && clock.empty()) return false;
  if (date == "W") return !time;
  for (const char* ok : {"", "D", "M", "MD", "Y", "YM", "YMD"}) {
    if (date != ok) continue;
    for (const char* c : {"", "H", "HM", "HMS", "M", "MS", "S"}) {
      if (clock == c) return !(date.empty() && clock.empty());
    }
  }
  return false;
}

// A label of 1 to 63 letters, digits and hyphens, no hyphen first or last, not "--" third and
// fourth (RFC 5891).
inline bool ValidLabel(std::string_view l) {
  if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
  if (l.size() >= 4 && l[2] == '-' && l[3] == '-') return false;
  for (char c : l) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

inline bool ValidHostname(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (std::string_view l : Split(s, '.')) {
    if (!ValidLabel(l)) return false;
  }
  return true;
}

// The subset generated (services/infer/text/README.md): a dot-atom of at most 64 characters,
// "@", a hostname of at least two labels whose last is 2 to 63 letters; 254 in all.
inline bool ValidEmail(std::string_view s) {
  const size_t at = s.find('@');
  if (at == std::string_view::npos || at == 0 || at > 64 || s.size() > 254) return false;
  for (std::string_view atom : Split(s.substr(0, at), '.')) {
    if (atom.empty()) return false;
    for (char c : atom) {
      if (!std::isalnum(static_cast<unsigned char>(c)) &&
          std::string_view("!#$%&'*+/=?^_`{|}~-").find(c) == std::string_view::npos) {
        return false;
      }
    }
  }
  const std::vector<std::string_view> labels = Split(s.substr(at + 1), '.');
  if (labels.size() < 2 || labels.back().size() < 2 || labels.back().size() > 63) return false;
  for (char c : labels.back()) {
    if (!std::isalpha(static_cast<unsigned char>(c))) return false;
  }
  for (std::string_view l : labels) {
    if (!ValidLabel(l)) return false;
  }
  return true;
}

inline bool ValidIpv4(const std::string& s) {
  in_addr a;
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

inline bool ValidIpv6(const std::string& s) {
  in6_addr a;
  return s.find_first_of(" %/") == std::string::npos && inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

inline bool ValidUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool hyphen = i == 8 || i == 13 || i == 18 || i == 23;
    if (hyphen ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// pydantic's UUID1 to UUID8: Python's uuid.UUID(s).version == `version` (which needs RFC 4122's
// variant, 10xx).
inline bool ValidUuidVersion(std::string_view s, char version) {
  return ValidUuid(s) && s[14] == version &&
         std::string_view("89abAB").find(s[19]) != std::string_view::npos;
}

inline bool ValidJsonPointer(std::string_view s) {
  if (!s.empty() && s[0] != '/') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '~' && (i + 1 == s.size() || (s[i + 1] != '0' && s[i + 1] != '1'))) return false;
  }
  return true;
}

inline bool ValidRelativeJsonPointer(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || (digits > 1 && s[0] == '0')) return false;
  return s.substr(digits) == "#" || ValidJsonPointer(s.substr(digits));
}

// RFC 3986's URI (`reference`: URI-reference), or with `iri` RFC 3987's IRI (IRI-reference),
// read by hand from the RFCs' grammars (not by a pattern).
class UriReference {
 public:
  UriReference(std::string_view s, bool iri) : iri_(iri) {
    for (size_t i = 0; i < s.size();) {
      const auto b = static_cast<unsigned char>(s[i]);
      const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      char32_t c = n == 1 ? b : b & (0x7F >> n);
      for (int k = 1; k < n && i + k < s.size(); ++k) c = c << 6 | (s[i + k] & 0x3F);
      c_.push_back(c);
      i += n;
    }
  }

  bool Uri() const {
    const size_t colon = SchemeEnd();
    return colon != kNone && HierPart(colon + 1, true);
  }
  bool Reference() const { return Uri() || HierPart(0, false); }

 private:
  static constexpr size_t kNone = std::u32string::npos;
  static bool Alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
  static bool Digit(char32_t c) { return c >= '0' && c <= '9'; }
  static bool Hex(char32_t c) {
    return Digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  static bool Ucschar(char32_t c) {
    if ((c >= 0xA0 && c <= 0xD7FF) || (c >= 0xF900 && c <= 0xFDCF) ||
        (c >= 0xFDF0 && c <= 0xFFEF)) {
      return true;
    }
    if (c >= 0xE1000 && c <= 0xEFFFD) return true;
    return c >= 0x10000 && c < 0xE0000 && (c & 0xFFFF) <= 0xFFFD;
  }
  static bool Iprivate(char32_t c) {
    return (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xF0000 && c <= 0xFFFFD) ||
           (c >= 0x100000 && c <= 0x10FFFD);
  }
  bool Unreserved(char32_t c) const {
    return Alpha(c) || Digit(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
           (iri_ && Ucschar(c));
  }
  static bool SubDelim(char32_t c) {
    return c < 0x80 &&
           std::string_view("!$&'()*+,;=").find(static_cast<char>(c)) != std::string_view::npos;
  }
  // Whether [from, to) is a run of characters `ok` accepts and percent-encodings.
  template <typename Ok>
  bool Run(size_t from, size_t to, Ok ok) const {
    for (size_t i = from; i < to; ++i) {
      if (c_[i] == '%') {
        if (i + 2 >= to || !Hex(c_[i + 1]) || !Hex(c_[i + 2])) return false;
        i += 2;
      } else if (!ok(c_[i])) {
        return false;
      }
    }
    return true;
  }
  bool Pchar(char32_t c) const { return Unreserved(c) || SubDelim(c) || c == ':' || c == '@'; }
  size_t Find(char32_t c, size_t from, size_t to) const {
    for (size_t i = from; i < to; ++i) {
      if (c_[i] == c) return i;
    }
    return kNone;
  }
  // The position of the scheme's ':' (kNone where the text has no scheme).
  size_t SchemeEnd() const {
    if (c_.empty() || !Alpha(c_[0])) return kNone;
    for (size_t i = 1; i < c_.size(); ++i) {
      if (c_[i] == ':') return i;
      if (!Alpha(c_[i]) && !Digit(c_[i]) && c_[i] != '+' && c_[i] != '-' && c_[i] != '.') {
        return kNone;
      }
    }
    return kNone;
  }
  bool Authority(size_t from, size_t to) const {
    const size_t at = Find('@', from, to);
    if (at != kNone) {
      if (!Run(from, at, [&](char32_t c) { return Unreserved(c) || SubDelim(c) || c == ':'; })) {
        return false;
      }
      from = at + 1;
    }
    size_t host_end = to;
    if (from < to && c_[from] == '[') {
      const size_t close = Find(']', from, to);
      if (close == kNone) return false;
      std::string inside;
      for (size_t i = from + 1; i < close; ++i) {
        if (c_[i] >= 0x80) return false;
        inside.push_back(static_cast<char>(c_[i]));
      }
      const bool future = inside.size() > 3 && (inside[0] == 'v' || inside[0] == 'V') && [&] {
        const size_t dot = inside.find('.');
        if (dot == std::string::npos || dot < 2 || dot + 1 == inside.size()) return false;
        for (size_t i = 1; i < dot; ++i) {
          if (!Hex(static_cast<unsigned char>(inside[i]))) return false;
        }
        for (size_t i = dot + 1; i < inside.size(); ++i) {
          const char32_t c = static_cast<unsigned char>(inside[i]);
          if (!(Alpha(c) || Digit(c) ||
                std::string_view("-._~").find(inside[i]) != std::string_view::npos || SubDelim(c) ||
                c == ':')) {
            return false;
          }
        }
        return true;
      }();
      if (!future && !ValidIpv6(inside)) return false;
      host_end = close + 1;
      if (host_end < to && c_[host_end] != ':') return false;
    } else {
      host_end = Find(':', from, to);
      if (host_end == kNone) host_end = to;
      if (!Run(from, host_end, [&](char32_t c) { return Unreserved(c) || SubDelim(c); })) {
        return false;
      }
    }
    for (size_t i = host_end + 1; i < to; ++i) {
      if (!Digit(c_[i])) return false;
    }
    return true;
  }
  // hier-part (a URI's, after its scheme) or relative-part, then the query and fragment.
  bool HierPart(size_t from, bool absolute) const {
    size_t end = c_.size();
    const size_t hash = Find('#', from, end);
    if (hash != kNone) {
      if (!Run(hash + 1, end, [&](char32_t c) { return Pchar(c) || c == '/' || c == '?'; })) {
        return false;
      }
      end = hash;
    }
    const size_t question = Find('?', from, end);
    if (question != kNone) {
      if (!Run(question + 1, end, [&](char32_t c) {
            return Pchar(c) || c == '/' || c == '?' || (iri_ && Iprivate(c));
          })) {
        return false;
      }
      end = question;
    }
    if (end - from >= 2 && c_[from] == '/' && c_[from + 1] == '/') {
      size_t slash = Find('/', from + 2, end);
      if (slash == kNone) slash = end;
      if (!Authority(from + 2, slash)) return false;
      from = slash;
    } else if (!absolute && from < end && c_[from] != '/') {
      // path-noscheme: no ':' in its first segment.
      size_t slash = Find('/', from, end);
      if (slash == kNone) slash = end;
      if (Find(':', from, slash) != kNone) return false;
    }
    return Run(from, end, [&](char32_t c) { return Pchar(c) || c == '/'; });
  }

  bool iri_;
  std::u32string c_;
};

// Whether `s` is valid under format `name` (formats not implemented: true, annotations).
inline bool ValidFormat(const std::string& name, const std::string& s) {
  if (name == "date") return ValidDate(s);
  if (name == "time") return ValidTime(s);
  if (name == "date-time") return ValidDateTime(s);
  if (name == "duration") return ValidDuration(s);
  if (name == "email") return ValidEmail(s);
  if (name == "hostname") return ValidHostname(s);
  if (name == "ipv4") return ValidIpv4(s);
  if (name == "ipv6") return ValidIpv6(s);
  if (name == "uuid") return ValidUuid(s);
  if (name.size() == 5 && name.rfind("uuid", 0) == 0) return ValidUuidVersion(s, name[4]);
  if (name == "json-pointer") return ValidJsonPointer(s);
  if (name == "relative-json-pointer") return ValidRelativeJsonPointer(s);
  if (name == "uri" || name == "iri") return UriReference(s, name == "iri").Uri();
  if (name == "uri-reference" || name == "iri-reference") {
    return UriReference(s, name == "iri-reference").Reference();
  }
  return true;
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
    if (schema.contains("pattern") &&
        !EcmaRegexSearch(schema["pattern"].get<std::string>(), v.get<std::string>())) {
      return false;
    }
    if (schema.contains("format") &&
        !ValidFormat(schema["format"].get<std::string>(), v.get<std::string>())) {
      return false;
    }
  }
  if (v.is_number_integer() && schema.value("format", "") == "int32" &&
      (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)) {
    return false;
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

// Appends to `out` the shortest printable ASCII bytes (no backslash; newlines and UTF-8
// continuation bytes too) that complete `m` to one value, searched breadth first over at most
// `limit` states; returns false when none is found.
inline bool CompleteShortest(const json::ByteMatcher& m, std::string* out, int limit = 20000) {
  std::deque<std::pair<json::ByteMatcher, std::string>> queue{{m, ""}};
  absl::flat_hash_set<json::ByteMatcher> seen{m};
  for (int expanded = 0; !queue.empty() && expanded < limit; ++expanded) {
    auto [state, text] = std::move(queue.front());
    queue.pop_front();
    if (state.Complete()) {
      *out += text;
      return true;
    }
    // Printable ASCII, then a newline (a tool call's XML markup needs it) and UTF-8 continuation
    // bytes (raw text may stop inside a character).
    for (int i = 0x20; i <= 0xBF; ++i) {
      const int b = i == 0x7F ? '\n' : i;
      json::ByteMatcher next = state;
      if (b == '\\' || !next.Advance(static_cast<uint8_t>(b)) || !seen.insert(next).second) {
        continue;
      }
      queue.push_back({std::move(next), text + static_cast<char>(b)});
    }
  }
  return false;
}

// Appends to `out` bytes that complete `m` to one value, chosen greedily (closing bytes first,
// never back to a state already passed, so that loops such as a number's digits or a pattern's
// a* are left); returns false when none is found within `limit` bytes.
inline bool CompleteGreedily(json::ByteMatcher m, std::string* out, int limit = 4000) {
  static constexpr std::string_view kPreferred = "\"}]0:n";
  absl::flat_hash_set<json::ByteMatcher> seen{m};
  auto step = [&](uint8_t b) {
    json::ByteMatcher next = m;
    if (!next.Advance(b) || !seen.insert(next).second) return false;
    m = std::move(next);
    *out += static_cast<char>(b);
    return true;
  };
  for (int i = 0; i < limit; ++i) {
    if (m.Complete()) return true;
    bool moved = false;
    for (char c : kPreferred) {
      if ((moved = step(static_cast<uint8_t>(c)))) break;
    }
    for (int b = 0; b < 256 && !moved; ++b) moved = step(static_cast<uint8_t>(b));
    if (!moved) return false;
  }
  return m.Complete();
}

// Appends to `out` bytes that complete `m`: greedily, else (a pattern the greedy choice loops
// in, such as ^a*b$) the shortest printable completion.
inline bool Complete(const json::ByteMatcher& m, std::string* out) {
  std::string greedy;
  if (CompleteGreedily(m, &greedy)) {
    *out += greedy;
    return true;
  }
  return CompleteShortest(m, out);
}

}  // namespace cairn::infer::text::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_JSON_TEST_UTIL_H_
