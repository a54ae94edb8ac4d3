#include "services/infer/text/jinja_builtins.h"

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::jinja::internal {

bool IsPySpace(uint32_t cp) {
  return (unicode::ClassOf(cp) & unicode::kSpace) != 0 || (cp >= 0x1C && cp <= 0x1F);
}

absl::Status TypeError(const Node& n, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("template line ", n.line, ": ", msg));
}

const char* KindName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
  }
  return "?";
}

std::vector<size_t> CodePointOffsets(const std::string& s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    int len = 1;
    unicode::DecodeUtf8(s, i, &len);
    i += len;
  }
  offs.push_back(s.size());
  return offs;
}

absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t len, const Value& start,
                                                  const Value& stop, const Value& step) {
  int64_t st = 1;
  if (!start.is_none() && !start.is_undefined() && !start.is_int()) {
    return absl::InvalidArgumentError("slice indices must be integers");
  }
  if (!stop.is_none() && !stop.is_undefined() && !stop.is_int()) {
    return absl::InvalidArgumentError("slice indices must be integers");
  }
  if (step.is_int()) st = step.as_int();
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t def) -> int64_t {
    if (!v.is_int()) return def;
    int64_t x = v.as_int();
    if (x < 0) {
      x += len;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t lo = adjust(start, st < 0 ? len - 1 : 0);
  const int64_t hi = adjust(stop, st < 0 ? -1 : len);
  std::vector<int64_t> out;
  if (st > 0) {
    for (int64_t i = lo; i < hi; i += st) out.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += st) out.push_back(i);
  }
  return out;
}

static bool IsStripChar(uint32_t cp, const std::vector<uint32_t>* chars) {
  if (chars == nullptr) return IsPySpace(cp);
  return std::find(chars->begin(), chars->end(), cp) != chars->end();
}

std::string PyStrip(const std::string& s, const Value* chars_arg, bool left, bool right) {
  std::vector<uint32_t> chars;
  const bool custom = chars_arg != nullptr && chars_arg->is_string();
  if (custom) {
    for (size_t i = 0; i < chars_arg->str().size();) {
      int len = 1;
      chars.push_back(unicode::DecodeUtf8(chars_arg->str(), i, &len));
      i += len;
    }
  }
  const std::vector<uint32_t>* set = custom ? &chars : nullptr;
  const std::vector<size_t> offs = CodePointOffsets(s);
  size_t b = 0, e = offs.size() - 1;  // Code point index range [b, e).
  auto cp_at = [&](size_t k) {
    int len = 1;
    return unicode::DecodeUtf8(s, offs[k], &len);
  };
  if (left) {
    while (b < e && IsStripChar(cp_at(b), set)) ++b;
  }
  if (right) {
    while (e > b && IsStripChar(cp_at(e - 1), set)) --e;
  }
  return s.substr(offs[b], offs[e] - offs[b]);
}

std::vector<std::string> PySplit(const std::string& s, const Value* sep_arg, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> parts;
  if (sep_arg == nullptr || sep_arg->is_none()) {
    // Runs of whitespace; leading and trailing whitespace ignored.
    const std::vector<size_t> offs = CodePointOffsets(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t k = 0;
    const size_t n = offs.size() - 1;
    auto space_at = [&](size_t idx) {
      int len = 1;
      return IsPySpace(unicode::DecodeUtf8(s, offs[idx], &len));
    };
    while (k < n) {
      while (k < n && space_at(k)) ++k;
      if (k >= n) break;
      size_t start = k;
      while (k < n && !space_at(k)) ++k;
      words.emplace_back(offs[start], offs[k]);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto& w : words) parts.push_back(s.substr(w.first, w.second - w.first));
      return parts;
    }
    if (!from_right) {
      for (int64_t i = 0; i < maxsplit; ++i) {
        parts.push_back(s.substr(words[i].first, words[i].second - words[i].first));
      }
      parts.push_back(PyStrip(s.substr(words[maxsplit].first), nullptr, false, true));
    } else {
      const size_t keep = words.size() - maxsplit;
      parts.push_back(PyStrip(s.substr(0, words[keep - 1].second), nullptr, true, false));
      for (size_t i = keep; i < words.size(); ++i) {
        parts.push_back(s.substr(words[i].first, words[i].second - words[i].first));
      }
    }
    return parts;
  }
  const std::string& sep = sep_arg->str();
  if (!from_right) {
    size_t start = 0;
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      const size_t at = s.find(sep, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + sep.size();
      ++splits;
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  size_t end = s.size();
  int64_t splits = 0;
  std::vector<std::string> rev;
  while (maxsplit < 0 || splits < maxsplit) {
    if (end < sep.size()) break;
    const size_t at = s.rfind(sep, end - sep.size());
    if (at == std::string::npos) break;
    rev.push_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
    ++splits;
  }
  rev.push_back(s.substr(0, end));
  parts.assign(rev.rbegin(), rev.rend());
  return parts;
}

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

std::string AsciiCase(std::string s, bool upper) {
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    if (!a.is_float() && !b.is_float()) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    for (size_t i = 0; i < a.list().size() && i < b.list().size(); ++i) {
      ASSIGN_OR_RETURN(int c, Compare(a.list()[i], b.list()[i]));
      if (c != 0) return c;
    }
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot order ", KindName(a), " and ", KindName(b)));
}

absl::StatusOr<Value> DictMethod(const Value& obj, const std::string& name) {
  return Value::Func(name, [obj, name](const CallArgs& args) -> absl::StatusOr<Value> {
    if (name == "get") {
      const Value* key = args.Get(0, "key");
      const Value* def = args.Get(1, "default");
      if (key == nullptr) return absl::InvalidArgumentError("get() needs a key");
      const Value* v = key->is_string() ? obj.dict().Find(key->str()) : nullptr;
      if (v != nullptr) return *v;
      return def != nullptr ? *def : Value::None();
    }
    ValueList out;
    for (const auto& kv : obj.dict().items) {
      if (name == "keys") {
        out.push_back(Value::String(kv.first));
      } else if (name == "values") {
        out.push_back(kv.second);
      } else {
        out.push_back(Value::List({Value::String(kv.first), kv.second}));
      }
    }
    return Value::List(std::move(out));
  });
}

absl::StatusOr<Value> StringMethod(const Node& n, const Value& obj, const std::string& name) {
  static const std::set<std::string>* kMethods = new std::set<std::string>{
      "startswith", "endswith", "strip", "lstrip",     "rstrip", "split", "rsplit",     "upper",
      "lower",      "replace",  "title", "capitalize", "find",   "count", "splitlines", "join"};
  if (kMethods->count(name) == 0) {
    if (name == "format") return TypeError(n, "str.format is not supported");
    return Value::Undefined(name);
  }
  const std::string s = obj.str();
  return Value::Func(name, [s, name](const CallArgs& args) -> absl::StatusOr<Value> {
    const Value* a0 = args.Get(0, "");
    if (name == "startswith" || name == "endswith") {
      if (a0 == nullptr) return absl::InvalidArgumentError(name + "() needs an argument");
      std::vector<std::string> options;
      if (a0->is_string()) {
        options.push_back(a0->str());
      } else if (a0->is_list()) {
        for (const Value& v : a0->list()) {
          if (!v.is_string()) return absl::InvalidArgumentError(name + "() needs strings");
          options.push_back(v.str());
        }
      } else {
        return absl::InvalidArgumentError(name + "() needs a string or tuple");
      }
      for (const std::string& o : options) {
        const bool hit =
            name == "startswith"
                ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = args.Get(0, "chars");
      if (chars != nullptr && !chars->is_string() && !chars->is_none()) {
        return absl::InvalidArgumentError(name + "() argument must be a string or None");
      }
      return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      const Value* sep = args.Get(0, "sep");
      const Value* max = args.Get(1, "maxsplit");
      if (sep != nullptr && !sep->is_none() && (!sep->is_string() || sep->str().empty())) {
        return absl::InvalidArgumentError("split() separator must be a non-empty string");
      }
      return StringList(
          PySplit(s, sep, max != nullptr && max->is_int() ? max->as_int() : -1, name == "rsplit"));
    }
    if (name == "upper" || name == "lower") return Value::String(AsciiCase(s, name == "upper"));
    if (name == "title" || name == "capitalize") {
      std::string out = AsciiCase(s, false);
      bool start = true;
      for (char& c : out) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
        if (alpha && start) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        if (name == "title") {
          start = !alpha;
        } else {
          start = false;
        }
      }
      return Value::String(out);
    }
    if (name == "replace") {
      const Value* old_s = args.Get(0, "old");
      const Value* new_s = args.Get(1, "new");
      const Value* count = args.Get(2, "count");
      if (old_s == nullptr || new_s == nullptr || !old_s->is_string() || !new_s->is_string()) {
        return absl::InvalidArgumentError("replace() needs two strings");
      }
      return Value::String(ReplaceAll(s, old_s->str(), new_s->str(),
                                      count != nullptr && count->is_int() ? count->as_int() : -1));
    }
    if (name == "find" || name == "count") {
      if (a0 == nullptr || !a0->is_string()) {
        return absl::InvalidArgumentError(name + "() needs a string");
      }
      if (name == "find") {
        const size_t at = s.find(a0->str());
        if (at == std::string::npos) return Value::Int(-1);
        return Value::Int(static_cast<int64_t>(unicode::CodePointCount(s.substr(0, at))));
      }
      if (a0->str().empty()) {
        return Value::Int(static_cast<int64_t>(unicode::CodePointCount(s)) + 1);
      }
      int64_t c = 0;
      for (size_t at = s.find(a0->str()); at != std::string::npos;
           at = s.find(a0->str(), at + a0->str().size())) {
        ++c;
      }
      return Value::Int(c);
    }
    if (name == "splitlines") {
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n' || s[k] == '\r') {
          lines.push_back(s.substr(start, k - start));
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          start = k + 1;
        }
      }
      if (start < s.size()) lines.push_back(s.substr(start));
      return StringList(lines);
    }
    // join
    if (a0 == nullptr || !a0->is_list()) return absl::InvalidArgumentError("join() needs a list");
    std::string out;
    for (size_t k = 0; k < a0->list().size(); ++k) {
      if (!a0->list()[k].is_string()) {
        return absl::InvalidArgumentError("join() needs a list of strings");
      }
      if (k > 0) out += s;
      out += a0->list()[k].str();
    }
    return Value::String(std::move(out));
  });
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

void AddGlobals(Scope* globals) {
  globals->emplace_back("raise_exception", Value::Func("raise_exception", [](const CallArgs& a) {
                          const Value* msg = a.Get(0, "message");
                          return absl::StatusOr<Value>(absl::FailedPreconditionError(
                              msg != nullptr ? msg->ToString() : "raise_exception"));
                        }));
  globals->emplace_back("namespace", Value::Func("namespace", [](const CallArgs& a) {
                          ValueDict d;
                          for (const Value& p : a.positional) {
                            if (p.is_dict()) {
                              for (const auto& kv : p.dict().items) d.Set(kv.first, kv.second);
                            }
                          }
                          for (const auto& kv : a.keyword) d.Set(kv.first, kv.second);
                          return absl::StatusOr<Value>(Value::Namespace(std::move(d)));
                        }));
  globals->emplace_back("dict", Value::Func("dict", [](const CallArgs& a) {
                          ValueDict d;
                          for (const auto& kv : a.keyword) d.Set(kv.first, kv.second);
                          return absl::StatusOr<Value>(Value::Dict(std::move(d)));
                        }));
  globals->emplace_back("range",
                        Value::Func("range", [](const CallArgs& a) -> absl::StatusOr<Value> {
                          int64_t start = 0, stop = 0, step = 1;
                          for (const Value& p : a.positional) {
                            if (!p.is_int()) {
                              return absl::InvalidArgumentError("range() needs integers");
                            }
                          }
                          if (a.positional.size() == 1) {
                            stop = a.positional[0].as_int();
                          } else if (a.positional.size() >= 2) {
                            start = a.positional[0].as_int();
                            stop = a.positional[1].as_int();
                            if (a.positional.size() >= 3) step = a.positional[2].as_int();
                          }
                          if (step == 0) return absl::InvalidArgumentError("range() step is 0");
                          ValueList items;
                          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                            if (items.size() >= (size_t{1} << 20)) {
                              return absl::ResourceExhaustedError("range() too long");
                            }
                            items.push_back(Value::Int(i));
                          }
                          return Value::List(std::move(items));
                        }));
  globals->emplace_back(
      "strftime_now", Value::Func("strftime_now", [](const CallArgs& a) -> absl::StatusOr<Value> {
        const Value* fmt = a.Get(0, "format");
        if (fmt == nullptr || !fmt->is_string()) {
          return absl::InvalidArgumentError("strftime_now() needs a format");
        }
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const size_t len = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
        return Value::String(std::string(buf, len));
      }));
}

}  // namespace cairn::infer::text::jinja::internal
