#ifndef CAIRN_SERVICES_INFER_TEXT_JINJA_VALUE_H_
#define CAIRN_SERVICES_INFER_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace cairn::infer::text::jinja {

class Value;
using ValueList = std::vector<Value>;

// An insertion-ordered string-keyed map (Python dict semantics for the keys templates use).
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* Find(const std::string& key) const;
  // Inserts or replaces `key`.
  void Set(const std::string& key, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Returns the argument at `index` or named `name`, else nullptr.
  const Value* Get(size_t index, const std::string& name) const;
};

using Function = std::function<absl::StatusOr<Value>(const CallArgs&)>;

// A template value: what Python values are to Jinja2. Lists and dicts are immutable and shared
// (templates render in an immutable sandbox); a namespace is the one mutable object.
// Thread-compatible; a Value shared between threads must not be a namespace being assigned.
class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace,
                    kFunction };

  Value() = default;  // Undefined.
  static Value Undefined(std::string name = "") {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  // An integer above INT64_MAX (JSON's unsigned 64-bit range): a float for arithmetic and
  // comparison, printed with its exact digits as Python prints the int; `is integer` holds.
  static Value BigInt(uint64_t u) {
    Value v(Kind::kFloat);
    v.float_ = static_cast<double>(u);
    v.str_ = absl::StrCat(u);
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value List(ValueList items) {
    Value v(Kind::kList);
    v.list_ = std::make_shared<const ValueList>(std::move(items));
    return v;
  }
  static Value Dict(ValueDict dict) {
    Value v(Kind::kDict);
    v.dict_ = std::make_shared<ValueDict>(std::move(dict));
    return v;
  }
  static Value Namespace(ValueDict dict) {
    Value v(Kind::kNamespace);
    v.dict_ = std::make_shared<ValueDict>(std::move(dict));
    return v;
  }
  static Value Func(std::string name, Function f) {
    Value v(Kind::kFunction);
    v.str_ = std::move(name);
    v.func_ = std::make_shared<const Function>(std::move(f));
    return v;
  }
  // Converts JSON (object key order preserved) to a value.
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // A BigInt: a kFloat holding an integer beyond int64.
  bool is_big_int() const { return kind_ == Kind::kFloat && !str_.empty(); }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // Also for kBool.
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  // The string of a kString; the name of an undefined value or function.
  const std::string& str() const { return str_; }
  const ValueList& list() const { return *list_; }
  const ValueDict& dict() const { return *dict_; }
  // The mutable dict of a namespace.
  ValueDict& mutable_namespace() const { return *dict_; }
  const Function& func() const { return *func_; }

  // Python truthiness.
  bool Truthy() const;
  // Python str(); an undefined value is "".
  std::string ToString() const;
  // Python repr().
  std::string Repr() const;
  // json.dumps(value, ensure_ascii=`ensure_ascii`, indent=`indent`, separators=(`item_sep`,
  // `key_sep`), sort_keys=`sort_keys`). Errors: InvalidArgument for values JSON cannot hold.
  absl::StatusOr<std::string> ToJson(bool ensure_ascii = false, int indent = -1,
                                     const std::string& item_sep = ", ",
                                     const std::string& key_sep = ": ",
                                     bool sort_keys = false) const;
  // Converts to JSON (object key order preserved). Errors: InvalidArgument for undefined
  // values, functions and non-finite floats.
  absl::StatusOr<nlohmann::ordered_json> ToJsonValue() const;

  // Python ==.
  bool Equals(const Value& other) const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const Function> func_;
};

// Python repr() of a float ("1.0", "1e-05", "1e+16", "inf").
std::string PyFloatRepr(double d);

}  // namespace cairn::infer::text::jinja

#endif  // CAIRN_SERVICES_INFER_TEXT_JINJA_VALUE_H_
