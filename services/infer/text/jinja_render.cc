#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/jinja_builtins.h"
#include "services/infer/text/jinja_renderer.h"
#include "services/infer/text/jinja_syntax.h"

namespace cairn::infer::text::jinja::internal {

Renderer::Renderer(const TemplateOptions& options, const ValueDict& context) : options_(options) {
  Scope globals;
  AddGlobals(&globals);
  for (const auto& kv : context.items) globals.emplace_back(kv.first, kv.second);
  stack_.push_back(std::move(globals));
}

absl::StatusOr<std::string> Renderer::Run(const Node& root) {
  std::string out;
  out_ = &out;
  ASSIGN_OR_RETURN(Flow flow, Exec(root));
  if (flow != Flow::kNormal) return TypeError(root, "break or continue outside a loop");
  return out;
}

Value Renderer::Lookup(const std::string& name) const {
  for (auto s = stack_.rbegin(); s != stack_.rend(); ++s) {
    for (auto it = s->rbegin(); it != s->rend(); ++it) {
      if (it->first == name) return it->second;
    }
  }
  return Value::Undefined(name);
}

void Renderer::Assign(const std::string& name, Value v) {
  Scope& scope = stack_.back();
  for (auto& kv : scope) {
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  }
  scope.emplace_back(name, std::move(v));
}

absl::Status Renderer::Emit(const Node& n, std::string_view text) {
  out_->append(text);
  if (out_->size() > options_.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("template line ", n.line, ": output exceeds ",
                                                     options_.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Renderer::Flow> Renderer::Exec(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kBlock:
      for (const NodePtr& k : n.kids) {
        ASSIGN_OR_RETURN(Flow f, Exec(*k));
        if (f != Flow::kNormal) return f;
      }
      return Flow::kNormal;
    case Node::Kind::kText:
      RETURN_IF_ERROR(Emit(n, n.name));
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
      RETURN_IF_ERROR(Emit(n, v.ToString()));
      return Flow::kNormal;
    }
    case Node::Kind::kIf: {
      const size_t pairs = n.kids.size() / 2;
      for (size_t k = 0; k < pairs; ++k) {
        ASSIGN_OR_RETURN(Value c, Eval(*n.kids[2 * k]));
        if (c.Truthy()) return Exec(*n.kids[2 * k + 1]);
      }
      if (n.flag) return Exec(*n.kids.back());
      return Flow::kNormal;
    }
    case Node::Kind::kFor:
      return ExecFor(n);
    case Node::Kind::kSet: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
      if (n.names.size() == 1) {
        Assign(n.names[0], std::move(v));
        return Flow::kNormal;
      }
      Value ns = Lookup(n.names[0]);
      if (!ns.is_namespace()) {
        return TypeError(
            n, absl::StrCat("cannot assign attribute on non-namespace object ", n.names[0]));
      }
      ns.mutable_namespace().Set(n.names[1], std::move(v));
      return Flow::kNormal;
    }
    case Node::Kind::kSetBlock: {
      std::string captured;
      std::string* saved = out_;
      out_ = &captured;
      absl::StatusOr<Flow> f = Exec(*n.kids[0]);
      out_ = saved;
      if (!f.ok()) return f.status();
      Assign(n.names[0], Value::String(std::move(captured)));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      Assign(n.name, MakeMacro(n));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    default: {
      ASSIGN_OR_RETURN(Value v, Eval(n));
      RETURN_IF_ERROR(Emit(n, v.ToString()));
      return Flow::kNormal;
    }
  }
}

absl::StatusOr<ValueList> Renderer::Iterate(const Node& n, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& kv : v.dict().items) keys.push_back(Value::String(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      const std::vector<size_t> offs = CodePointOffsets(v.str());
      for (size_t k = 0; k + 1 < offs.size(); ++k) {
        chars.push_back(Value::String(v.str().substr(offs[k], offs[k + 1] - offs[k])));
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return ValueList();
    default:
      return TypeError(n, absl::StrCat("'", KindName(v), "' object is not iterable"));
  }
}

absl::StatusOr<Renderer::Flow> Renderer::ExecFor(const Node& n) {
  ASSIGN_OR_RETURN(Value seq, Eval(*n.kids[0]));
  ASSIGN_OR_RETURN(ValueList items, Iterate(n, seq));
  const Node* filter = n.kids[3].get();
  if (filter != nullptr) {
    ValueList kept;
    for (Value& item : items) {
      stack_.emplace_back();
      absl::Status s = BindTargets(n, item);
      absl::StatusOr<Value> c = s.ok() ? Eval(*filter) : absl::StatusOr<Value>(s);
      stack_.pop_back();
      if (!c.ok()) return c.status();
      if (c->Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (n.kids[2] != nullptr) return Exec(*n.kids[2]);
    return Flow::kNormal;
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    if (++iterations_ > options_.max_loop_iterations) {
      return absl::ResourceExhaustedError(absl::StrCat("template line ", n.line, ": more than ",
                                                       options_.max_loop_iterations,
                                                       " loop iterations"));
    }
    stack_.emplace_back();
    RETURN_IF_ERROR(BindTargets(n, items[i]));
    ValueDict loop;
    loop.items.reserve(10);
    loop.items.emplace_back("index", Value::Int(i + 1));
    loop.items.emplace_back("index0", Value::Int(i));
    loop.items.emplace_back("revindex", Value::Int(len - i));
    loop.items.emplace_back("revindex0", Value::Int(len - i - 1));
    loop.items.emplace_back("first", Value::Bool(i == 0));
    loop.items.emplace_back("last", Value::Bool(i == len - 1));
    loop.items.emplace_back("length", Value::Int(len));
    loop.items.emplace_back("depth", Value::Int(1));
    loop.items.emplace_back("previtem", i > 0 ? items[i - 1] : Value::Undefined("previtem"));
    loop.items.emplace_back("nextitem", i + 1 < len ? items[i + 1] : Value::Undefined("nextitem"));
    loop.items.emplace_back("cycle", Value::Func("cycle", [i](const CallArgs& a) {
                              if (a.positional.empty()) {
                                return absl::StatusOr<Value>(absl::InvalidArgumentError(
                                    "loop.cycle needs at least one argument"));
                              }
                              return absl::StatusOr<Value>(a.positional[i % a.positional.size()]);
                            }));
    Assign("loop", Value::Dict(std::move(loop)));
    absl::StatusOr<Flow> f = Exec(*n.kids[1]);
    stack_.pop_back();
    if (!f.ok()) return f.status();
    if (*f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

absl::Status Renderer::BindTargets(const Node& n, const Value& item) {
  if (n.names.size() == 1) {
    Assign(n.names[0], item);
    return absl::OkStatus();
  }
  if (!item.is_list() || item.list().size() != n.names.size()) {
    return TypeError(n, absl::StrCat("cannot unpack ", item.Repr(), " into ", n.names.size(),
                                     " loop variables"));
  }
  for (size_t k = 0; k < n.names.size(); ++k) Assign(n.names[k], item.list()[k]);
  return absl::OkStatus();
}

Value Renderer::MakeMacro(const Node& n) {
  const Node* macro = &n;
  return Value::Func(n.name, [this, macro](const CallArgs& args) -> absl::StatusOr<Value> {
    return CallMacro(*macro, args);
  });
}

absl::StatusOr<Value> Renderer::CallMacro(const Node& m, const CallArgs& args) {
  if (args.positional.size() > m.names.size()) {
    return TypeError(
        m, absl::StrCat("macro ", m.name, " takes at most ", m.names.size(), " arguments"));
  }
  for (const auto& kv : args.keyword) {
    if (std::find(m.names.begin(), m.names.end(), kv.first) == m.names.end()) {
      return TypeError(m, absl::StrCat("macro ", m.name, " has no parameter ", kv.first));
    }
  }
  if (++depth_ > options_.max_call_depth) {
    --depth_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "template line ", m.line, ": macro calls nested deeper than ", options_.max_call_depth));
  }
  // A macro sees the template's top-level scope and its own parameters.
  std::vector<Scope> saved = std::move(stack_);
  stack_.clear();
  stack_.push_back(saved.front());
  stack_.emplace_back();
  absl::Status status;
  for (size_t k = 0; k < m.names.size() && status.ok(); ++k) {
    const Value* v = args.Get(k, m.names[k]);
    if (v != nullptr) {
      Assign(m.names[k], *v);
    } else if (m.kids[k + 1] != nullptr) {
      absl::StatusOr<Value> d = Eval(*m.kids[k + 1]);
      if (d.ok()) {
        Assign(m.names[k], *std::move(d));
      } else {
        status = d.status();
      }
    } else {
      Assign(m.names[k], Value::Undefined(m.names[k]));
    }
  }
  std::string captured;
  std::string* saved_out = out_;
  out_ = &captured;
  if (status.ok()) {
    absl::StatusOr<Flow> f = Exec(*m.kids[0]);
    if (!f.ok()) status = f.status();
  }
  out_ = saved_out;
  stack_ = std::move(saved);
  --depth_;
  RETURN_IF_ERROR(status);
  return Value::String(std::move(captured));
}

absl::StatusOr<Value> Renderer::Eval(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kLiteral:
      return n.literal;
    case Node::Kind::kName:
      return Lookup(n.name);
    case Node::Kind::kAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*n.kids[0]));
      return GetAttr(n, obj, n.name);
    }
    case Node::Kind::kItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*n.kids[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*n.kids[1]));
      return GetItem(n, obj, key);
    }
    case Node::Kind::kSlice:
      return EvalSlice(n);
    case Node::Kind::kCall: {
      ASSIGN_OR_RETURN(Value callee, Eval(*n.kids[0]));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(n));
      if (callee.is_undefined()) {
        return TypeError(n, absl::StrCat("'", callee.str(), "' is undefined"));
      }
      if (!callee.is_function()) {
        return TypeError(n, absl::StrCat("'", KindName(callee), "' object is not callable"));
      }
      absl::StatusOr<Value> r = callee.func()(args);
      if (!r.ok() && r.status().message().find("template line") == std::string_view::npos &&
          r.status().code() == absl::StatusCode::kInvalidArgument) {
        return TypeError(n, r.status().message());
      }
      return r;
    }
    case Node::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(n));
      return ApplyFilter(n, n.name, v, args);
    }
    case Node::Kind::kTest: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(n));
      ASSIGN_OR_RETURN(bool r, ApplyTest(n, n.name, v, args));
      return Value::Bool(r != n.flag);
    }
    case Node::Kind::kNeg:
    case Node::Kind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
      if (!v.is_number()) {
        return TypeError(n, absl::StrCat("bad operand type for unary minus: ", KindName(v)));
      }
      if (n.kind == Node::Kind::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
      if (v.is_float()) return Value::Float(-v.as_double());
      if (v.as_int() == INT64_MIN) return TypeError(n, "integer overflow in unary minus");
      return Value::Int(-v.as_int());
    }
    case Node::Kind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
      return Value::Bool(!v.Truthy());
    }
    case Node::Kind::kAnd: {
      ASSIGN_OR_RETURN(Value l, Eval(*n.kids[0]));
      if (!l.Truthy()) return l;
      return Eval(*n.kids[1]);
    }
    case Node::Kind::kOr: {
      ASSIGN_OR_RETURN(Value l, Eval(*n.kids[0]));
      if (l.Truthy()) return l;
      return Eval(*n.kids[1]);
    }
    case Node::Kind::kCond: {
      ASSIGN_OR_RETURN(Value c, Eval(*n.kids[1]));
      if (c.Truthy()) return Eval(*n.kids[0]);
      if (n.kids[2] != nullptr) return Eval(*n.kids[2]);
      return Value::Undefined();
    }
    case Node::Kind::kList:
    case Node::Kind::kTuple: {
      ValueList items;
      for (const NodePtr& k : n.kids) {
        ASSIGN_OR_RETURN(Value v, Eval(*k));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case Node::Kind::kDict: {
      ValueDict dict;
      for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
        ASSIGN_OR_RETURN(Value key, Eval(*n.kids[k]));
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[k + 1]));
        if (!key.is_string()) return TypeError(n, "dict keys must be strings");
        dict.Set(key.str(), std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    case Node::Kind::kBinary:
      return EvalBinary(n);
    default:
      return TypeError(n, "statement used as an expression");
  }
}

absl::StatusOr<CallArgs> Renderer::EvalArgs(const Node& n) {
  CallArgs args;
  for (size_t k = 1; k < n.kids.size(); ++k) {
    ASSIGN_OR_RETURN(Value v, Eval(*n.kids[k]));
    if (n.names[k].empty()) {
      args.positional.push_back(std::move(v));
    } else {
      args.keyword.emplace_back(n.names[k], std::move(v));
    }
  }
  return args;
}

absl::StatusOr<Value> Renderer::GetAttr(const Node& n, const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return TypeError(n, absl::StrCat("'", obj.str().empty() ? "value" : obj.str(),
                                       "' is undefined (reading attribute '", name, "')"));
    case Value::Kind::kDict: {
      if (name == "items" || name == "keys" || name == "values" || name == "get") {
        return DictMethod(obj, name);
      }
      const Value* v = obj.dict().Find(name);
      return v != nullptr ? *v : Value::Undefined(name);
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.dict().Find(name);
      return v != nullptr ? *v : Value::Undefined(name);
    }
    case Value::Kind::kString:
      return StringMethod(n, obj, name);
    default:
      return Value::Undefined(name);
  }
}

absl::StatusOr<Value> Renderer::GetItem(const Node& n, const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return TypeError(n, absl::StrCat("'", obj.str().empty() ? "value" : obj.str(),
                                       "' is undefined (reading an item)"));
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (!key.is_string()) return Value::Undefined();
      const Value* v = obj.dict().Find(key.str());
      return v != nullptr ? *v : Value::Undefined(key.str());
    }
    case Value::Kind::kList: {
      if (!key.is_int()) return Value::Undefined();
      int64_t i = key.as_int();
      const int64_t len = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value::Undefined();
      return obj.list()[i];
    }
    case Value::Kind::kString: {
      if (!key.is_int()) return GetAttr(n, obj, key.ToString());
      const std::vector<size_t> offs = CodePointOffsets(obj.str());
      int64_t i = key.as_int();
      const int64_t len = static_cast<int64_t>(offs.size()) - 1;
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value::Undefined();
      return Value::String(obj.str().substr(offs[i], offs[i + 1] - offs[i]));
    }
    default:
      return Value::Undefined();
  }
}

absl::StatusOr<Value> Renderer::EvalSlice(const Node& n) {
  ASSIGN_OR_RETURN(Value obj, Eval(*n.kids[0]));
  Value parts[3];
  for (int k = 0; k < 3; ++k) {
    if (n.kids[k + 1] != nullptr) {
      ASSIGN_OR_RETURN(parts[k], Eval(*n.kids[k + 1]));
    } else {
      parts[k] = Value::None();
    }
  }
  if (obj.is_list()) {
    absl::StatusOr<std::vector<int64_t>> idx =
        SliceIndices(static_cast<int64_t>(obj.list().size()), parts[0], parts[1], parts[2]);
    if (!idx.ok()) return TypeError(n, idx.status().message());
    ValueList items;
    for (int64_t i : *idx) items.push_back(obj.list()[i]);
    return Value::List(std::move(items));
  }
  if (obj.is_string()) {
    const std::vector<size_t> offs = CodePointOffsets(obj.str());
    absl::StatusOr<std::vector<int64_t>> idx =
        SliceIndices(static_cast<int64_t>(offs.size()) - 1, parts[0], parts[1], parts[2]);
    if (!idx.ok()) return TypeError(n, idx.status().message());
    std::string out;
    for (int64_t i : *idx) out.append(obj.str(), offs[i], offs[i + 1] - offs[i]);
    return Value::String(std::move(out));
  }
  if (obj.is_undefined()) {
    return TypeError(n, absl::StrCat("'", obj.str(), "' is undefined (slicing)"));
  }
  return TypeError(n, absl::StrCat("'", KindName(obj), "' object is not subscriptable"));
}

absl::StatusOr<Value> Renderer::EvalBinary(const Node& n) {
  ASSIGN_OR_RETURN(Value a, Eval(*n.kids[0]));
  ASSIGN_OR_RETURN(Value b, Eval(*n.kids[1]));
  const std::string& op = n.name;
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "~") return Value::String(a.ToString() + b.ToString());
  if (op == "in" || op == "not in") {
    ASSIGN_OR_RETURN(bool in, Contains(n, b, a));
    return Value::Bool(in == (op == "in"));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    absl::StatusOr<int> c = Compare(a, b);
    if (!c.ok()) return TypeError(n, c.status().message());
    if (op == "<") return Value::Bool(*c < 0);
    if (op == ">") return Value::Bool(*c > 0);
    if (op == "<=") return Value::Bool(*c <= 0);
    return Value::Bool(*c >= 0);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
    if (a.is_list() && b.is_list()) {
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(items));
    }
  }
  if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
    const Value& s = a.is_string() ? a : b;
    const int64_t times = a.is_string() ? b.as_int() : a.as_int();
    if (times > 0 && !s.str().empty() &&
        static_cast<uint64_t>(times) > options_.max_output_bytes / s.str().size()) {
      return absl::ResourceExhaustedError("string repetition too large");
    }
    std::string out;
    for (int64_t k = 0; k < times; ++k) out += s.str();
    return Value::String(std::move(out));
  }
  if (!a.is_number() || !b.is_number()) {
    return TypeError(n, absl::StrCat("unsupported operand type(s) for ", op, ": '", KindName(a),
                                     "' and '", KindName(b), "'"));
  }
  const bool ints = !a.is_float() && !b.is_float();
  const double x = a.as_double(), y = b.as_double();
  // Python integers do not overflow; ours are 64-bit, so overflow is an error.
  const absl::Status overflow = TypeError(n, absl::StrCat("integer overflow in ", op));
  int64_t r = 0;
  if (op == "+") {
    if (!ints) return Value::Float(x + y);
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow;
    return Value::Int(r);
  }
  if (op == "-") {
    if (!ints) return Value::Float(x - y);
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return overflow;
    return Value::Int(r);
  }
  if (op == "*") {
    if (!ints) return Value::Float(x * y);
    if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return overflow;
    return Value::Int(r);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      r = 1;
      for (int64_t k = 0; k < b.as_int(); ++k) {
        if (__builtin_mul_overflow(r, a.as_int(), &r)) return overflow;
        if (r == 0 || r == 1) break;
      }
      return Value::Int(r);
    }
    return Value::Float(std::pow(x, y));
  }
  if (y == 0) return TypeError(n, "division by zero");
  if (ints && b.as_int() == -1 && a.as_int() == INT64_MIN) return overflow;
  if (op == "/") return Value::Float(x / y);
  if (op == "//") {
    if (ints) {
      int64_t q = a.as_int() / b.as_int();
      if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
      return Value::Int(q);
    }
    return Value::Float(std::floor(x / y));
  }
  if (op == "%") {
    if (ints) {
      int64_t m = a.as_int() % b.as_int();
      if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
      return Value::Int(m);
    }
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::Float(m);
  }
  return TypeError(n, absl::StrCat("unsupported operator ", op));
}

absl::StatusOr<std::string> RenderTree(const Node& root, const TemplateOptions& options,
                                       const ValueDict& context) {
  Renderer renderer(options, context);
  return renderer.Run(root);
}

}  // namespace cairn::infer::text::jinja::internal
