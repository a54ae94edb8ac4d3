#include "services/infer/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::jinja {
namespace {

// Appends `s` as a JSON string literal the way Python's json.dumps writes it.
void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '\b': *out += "\\b"; break;
        case '\f': *out += "\\f"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            *out += buf;
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    int len = 1;
    const uint32_t cp = unicode::DecodeUtf8(s, i, &len);
    if (!ensure_ascii) {
      out->append(s, i, len);
    } else {
      char buf[16];
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
    }
    i += len;
  }
  out->push_back('"');
}

// Python repr() of a str.
std::string PyStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    const uint32_t cp = unicode::DecodeUtf8(s, i, &len);
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if ((unicode::ClassOf(cp) & unicode::kNonPrintable) != 0) {
      // Python's repr() escapes what str.isprintable() rejects: \xhh, \uhhhh or \Uhhhhhhhh.
      if (cp <= 0xFF) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      } else if (cp <= 0xFFFF) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
      }
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out.push_back(quote);
  return out;
}

absl::Status AppendJson(const Value& v, bool ensure_ascii, int indent, int level,
                        const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                        std::string* out) {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      if (v.is_big_int()) {
        *out += v.str();
      } else if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PyFloatRepr(d);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.str(), ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      bool first = true;
      for (const Value& item : v.list()) {
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        RETURN_IF_ERROR(
            AppendJson(item, ensure_ascii, indent, level + 1, item_sep, key_sep, sort_keys, out));
      }
      newline(level);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      bool first = true;
      for (const auto* kv : items) {
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        AppendJsonString(kv->first, ensure_ascii, out);
        *out += key_sep;
        RETURN_IF_ERROR(AppendJson(kv->second, ensure_ascii, indent, level + 1, item_sep, key_sep,
                                   sort_keys, out));
      }
      newline(level);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot serialise undefined value '", v.str(), "' to JSON"));
    case Value::Kind::kFunction:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot serialise function ", v.str(), " to JSON"));
  }
  return absl::InternalError("unreachable value kind");
}

}  // namespace

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]D[.DDD]e[+-]XX
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string out = sign;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits;
      out.append(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0');
      out += ".0";
    } else {
      out += digits.substr(0, exp + 1);
      out += ".";
      out += digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += ".";
    out += digits.substr(1);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  out += ebuf;
  return out;
}

const Value* ValueDict::Find(const std::string& key) const {
  for (const auto& kv : items) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

void ValueDict::Set(const std::string& key, Value value) {
  for (auto& kv : items) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::Get(size_t index, const std::string& name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& kv : keyword) {
    if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return BigInt(j.get<uint64_t>());
      return Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      dict.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        dict.items.emplace_back(it.key(), FromJson(it.value()));
      }
      return Dict(std::move(dict));
    }
    default:
      return Undefined();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_);
    case Kind::kFloat:
      return is_big_int() ? str_ : PyFloatRepr(float_);
    case Kind::kString:
      return PyStringRepr(str_);
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
      }
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += PyStringRepr(kv.first) + ": " + kv.second.Repr();
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kFunction:
      return absl::StrCat("<function ", str_, ">");
  }
  return "";
}

absl::StatusOr<std::string> Value::ToJson(bool ensure_ascii, int indent,
                                          const std::string& item_sep,
                                          const std::string& key_sep, bool sort_keys) const {
  std::string out;
  RETURN_IF_ERROR(AppendJson(*this, ensure_ascii, indent, 0, item_sep, key_sep, sort_keys, &out));
  return out;
}

absl::StatusOr<nlohmann::ordered_json> Value::ToJsonValue() const {
  switch (kind_) {
    case Kind::kNone:
      return nlohmann::ordered_json(nullptr);
    case Kind::kBool:
      return nlohmann::ordered_json(as_bool());
    case Kind::kInt:
      return nlohmann::ordered_json(int_);
    case Kind::kFloat:
      if (is_big_int()) {
        // str_ holds the digits BigInt printed, so they parse back.
        uint64_t u = 0;
        std::from_chars(str_.data(), str_.data() + str_.size(), u);
        return nlohmann::ordered_json(u);
      }
      if (!std::isfinite(float_)) return absl::InvalidArgumentError("non-finite float in JSON");
      return nlohmann::ordered_json(float_);
    case Kind::kString:
      return nlohmann::ordered_json(str_);
    case Kind::kList: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Value& v : *list_) {
        ASSIGN_OR_RETURN(nlohmann::ordered_json e, v.ToJsonValue());
        out.push_back(std::move(e));
      }
      return out;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (const auto& kv : dict_->items) {
        ASSIGN_OR_RETURN(nlohmann::ordered_json e, kv.second.ToJsonValue());
        out[kv.first] = std::move(e);
      }
      return out;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("cannot convert ", Repr(), " to JSON"));
  }
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind_ == Kind::kFloat || other.kind_ == Kind::kFloat) {
      return as_double() == other.as_double();
    }
    return int_ == other.int_;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return str_ == other.str_;
    case Kind::kList: {
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->items.size() != other.dict_->items.size()) return false;
      for (const auto& kv : dict_->items) {
        const Value* o = other.dict_->Find(kv.first);
        if (o == nullptr || !kv.second.Equals(*o)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return dict_ == other.dict_;
    case Kind::kFunction:
      return func_ == other.func_;
    default:
      return false;
  }
}

}  // namespace cairn::infer::text::jinja
