// The renderer's `in` operator, filters and tests (class Renderer, jinja_renderer.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/jinja_builtins.h"
#include "services/infer/text/jinja_renderer.h"
#include "services/infer/text/jinja_syntax.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::jinja::internal {

absl::StatusOr<bool> Renderer::Contains(const Node& n, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(
            n, absl::StrCat("'in <string>' requires string as left operand, not ", KindName(item)));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return item.is_string() && container.dict().Find(item.str()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return TypeError(
          n, absl::StrCat("argument of type '", KindName(container), "' is not iterable"));
  }
}

absl::StatusOr<Value> Renderer::ApplyFilter(const Node& n, const std::string& name, const Value& v,
                                            const CallArgs& args) {
  const Value* a0 = args.Get(0, "");
  if (name == "tojson") {
    const Value* ensure_ascii = args.Get(0, "ensure_ascii");
    const Value* indent = args.Get(1, "indent");
    const Value* separators = args.Get(2, "separators");
    const Value* sort_keys = args.Get(3, "sort_keys");
    const bool has_indent = indent != nullptr && indent->is_int();
    std::string item_sep = has_indent ? "," : ", ";
    std::string key_sep = ": ";
    if (separators != nullptr && separators->is_list() && separators->list().size() == 2) {
      item_sep = separators->list()[0].ToString();
      key_sep = separators->list()[1].ToString();
    }
    absl::StatusOr<std::string> json =
        v.ToJson(ensure_ascii != nullptr && ensure_ascii->Truthy(),
                 has_indent ? static_cast<int>(indent->as_int()) : -1, item_sep, key_sep,
                 sort_keys != nullptr && sort_keys->Truthy());
    if (!json.ok()) return TypeError(n, json.status().message());
    return Value::String(*std::move(json));
  }
  if (name == "trim") {
    return Value::String(PyStrip(v.ToString(), args.Get(0, "chars"), true, true));
  }
  if (name == "length" || name == "count") {
    switch (v.kind()) {
      case Value::Kind::kString:
        return Value::Int(static_cast<int64_t>(unicode::CodePointCount(v.str())));
      case Value::Kind::kList:
        return Value::Int(static_cast<int64_t>(v.list().size()));
      case Value::Kind::kDict:
      case Value::Kind::kNamespace:
        return Value::Int(static_cast<int64_t>(v.dict().items.size()));
      case Value::Kind::kUndefined:
        return Value::Int(0);
      default:
        return TypeError(n, absl::StrCat("object of type '", KindName(v), "' has no len()"));
    }
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::List({});
    if (!v.is_dict()) return TypeError(n, "can only get item pairs from a mapping");
    ASSIGN_OR_RETURN(Value method, DictMethod(v, "items"));
    return method.func()(CallArgs());
  }
  if (name == "string") return v.is_string() ? v : Value::String(v.ToString());
  if (name == "safe") return Value::String(v.ToString());
  if (name == "e" || name == "escape") return Value::String(HtmlEscape(v.ToString()));
  if (name == "default" || name == "d") {
    const Value* def = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use_default =
        v.is_undefined() || (boolean != nullptr && boolean->Truthy() && !v.Truthy());
    if (!use_default) return v;
    return def != nullptr ? *def : Value::String("");
  }
  if (name == "join") {
    const Value* sep = args.Get(0, "d");
    const Value* attr = args.Get(1, "attribute");
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0 && sep != nullptr) out += sep->ToString();
      if (attr != nullptr) {
        ASSIGN_OR_RETURN(Value field, GetAttr(n, items[k], attr->ToString()));
        out += field.ToString();
      } else {
        out += items[k].ToString();
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    if (items.empty()) return Value::Undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "lower" || name == "upper") {
    return Value::String(AsciiCase(v.ToString(), name == "upper"));
  }
  if (name == "title" || name == "capitalize") {
    ASSIGN_OR_RETURN(Value method, StringMethod(n, Value::String(v.ToString()), name));
    return method.func()(CallArgs());
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(Value method, StringMethod(n, Value::String(v.ToString()), "replace"));
    return method.func()(args);
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    return Value::List(std::move(items));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      ASSIGN_OR_RETURN(ValueList chars, Iterate(n, v));
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->str();
      return Value::String(std::move(out));
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    ValueList out;
    for (const Value& item : items) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.Equals(item); })) {
        out.push_back(item);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "sort" || name == "dictsort") {
    ValueList items;
    if (name == "dictsort") {
      if (!v.is_dict()) return TypeError(n, "dictsort needs a mapping");
      ASSIGN_OR_RETURN(Value method, DictMethod(v, "items"));
      ASSIGN_OR_RETURN(Value pairs, method.func()(CallArgs()));
      items = pairs.list();
    } else {
      ASSIGN_OR_RETURN(items, Iterate(n, v));
    }
    const Value* reverse = args.Get(0, "reverse");
    const Value* attr = args.Get(2, "attribute");
    absl::Status status;
    auto key = [&](const Value& item) -> Value {
      if (name == "dictsort") return item.list()[0];
      if (attr == nullptr) return item;
      absl::StatusOr<Value> f = GetAttr(n, item, attr->ToString());
      return f.ok() ? *f : Value::Undefined();
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      absl::StatusOr<int> c = Compare(key(x), key(y));
      if (!c.ok()) {
        status = c.status();
        return false;
      }
      return *c < 0;
    });
    if (!status.ok()) return TypeError(n, status.message());
    if (reverse != nullptr && reverse->Truthy()) std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  // Jinja2's map and select family guard their loop with `if value:`: a falsy value (none,
  // an empty string) yields nothing, before the arguments are even looked at.
  const bool lazy_sequence = name == "map" || name == "select" || name == "reject" ||
                             name == "selectattr" || name == "rejectattr";
  if (lazy_sequence && !v.Truthy()) return Value::List({});
  if (name == "map") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    const Value* attr = args.Get(99, "attribute");
    ValueList out;
    for (const Value& item : items) {
      if (attr != nullptr) {
        ASSIGN_OR_RETURN(Value f, GetAttr(n, item, attr->ToString()));
        out.push_back(std::move(f));
        continue;
      }
      if (a0 == nullptr || !a0->is_string() || KnownFilters().count(a0->str()) == 0) {
        return TypeError(n, "map needs attribute= or a known filter name");
      }
      CallArgs rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      ASSIGN_OR_RETURN(Value f, ApplyFilter(n, a0->str(), item, rest));
      out.push_back(std::move(f));
    }
    return Value::List(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    const size_t test_index = by_attr ? 1 : 0;
    const Value* test = args.Get(test_index, "");
    if (test != nullptr && (!test->is_string() || KnownTests().count(test->str()) == 0)) {
      return TypeError(n, absl::StrCat(name, " needs a known test name"));
    }
    CallArgs rest;
    if (args.positional.size() > test_index + 1) {
      rest.positional.assign(args.positional.begin() + test_index + 1, args.positional.end());
    }
    ValueList out;
    for (const Value& item : items) {
      Value subject = item;
      if (by_attr) {
        if (a0 == nullptr) return TypeError(n, absl::StrCat(name, " needs an attribute"));
        ASSIGN_OR_RETURN(subject, GetAttr(n, item, a0->ToString()));
      }
      bool r = subject.Truthy();
      if (test != nullptr) {
        ASSIGN_OR_RETURN(r, ApplyTest(n, test->str(), subject, rest));
      }
      if (r == keep_if) out.push_back(item);
    }
    return Value::List(std::move(out));
  }
  if (name == "int") {
    if (v.is_float()) {
      const double d = v.as_double();
      if (!std::isfinite(d) || d >= 9.2e18 || d <= -9.2e18) {
        return TypeError(n, "int filter: value out of range");
      }
      return Value::Int(static_cast<int64_t>(d));
    }
    if (v.is_number()) return Value::Int(v.as_int());
    if (v.is_string()) return Value::Int(std::strtoll(v.str().c_str(), nullptr, 10));
    return Value::Int(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value::Float(v.as_double());
    if (v.is_string()) return Value::Float(std::strtod(v.str().c_str(), nullptr));
    return Value::Float(0);
  }
  if (name == "abs") {
    if (!v.is_number()) return TypeError(n, "abs needs a number");
    return v.is_float() ? Value::Float(std::fabs(v.as_double()))
                        : Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  return TypeError(n, absl::StrCat("unsupported filter '", name, "'"));
}

absl::StatusOr<bool> Renderer::ApplyTest(const Node& n, const std::string& name, const Value& v,
                                         const CallArgs& args) {
  const Value* a0 = args.Get(0, "");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int() || v.is_big_int();
  if (name == "float") return v.is_float() && !v.is_big_int();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && AsciiCase(v.str(), false) == v.str();
  if (name == "upper") return v.is_string() && AsciiCase(v.str(), true) == v.str();
  if (name == "even" || name == "odd") {
    if (!v.is_int()) return TypeError(n, absl::StrCat("test ", name, " needs an integer"));
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (a0 == nullptr) return TypeError(n, absl::StrCat("test ", name, " needs an argument"));
  if (name == "divisibleby") {
    if (!v.is_int() || !a0->is_int() || a0->as_int() == 0) {
      return TypeError(n, "divisibleby needs non-zero integers");
    }
    return v.as_int() % a0->as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(*a0);
  if (name == "ne") return !v.Equals(*a0);
  if (name == "sameas") {
    return v.kind() == a0->kind() &&
           (v.is_none() || v.is_undefined() || (v.is_bool() && v.Equals(*a0)));
  }
  if (name == "in") return Contains(n, *a0, v);
  absl::StatusOr<int> c = Compare(v, *a0);
  if (!c.ok()) return TypeError(n, c.status().message());
  if (name == "lt") return *c < 0;
  if (name == "le") return *c <= 0;
  if (name == "gt") return *c > 0;
  if (name == "ge") return *c >= 0;
  return TypeError(n, absl::StrCat("unsupported test '", name, "'"));
}

}  // namespace cairn::infer::text::jinja::internal
