#include "services/gateway/openai/json_util.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/json/json_scan.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<Json> ParseJsonObject(absl::string_view body, int max_depth) {
  if (body.empty()) return absl::InvalidArgumentError("request body is empty; expected JSON");
  if (JsonNestingDepth(body, max_depth) > max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("request JSON is nested deeper than ", max_depth, " levels"));
  }
  // Json keeps members in the client's order (tool schemas and response formats reach the
  // model so), at a parse cost quadratic in an object's members (common/json/json_scan.h):
  // bounded for each object and for the whole body.
  const JsonObjectScan scan = ScanJsonObjects(body);
  if (scan.largest_members > kMaxOrderedJsonObjectMembers) {
    return absl::InvalidArgumentError(absl::StrCat("request JSON has an object of more than ",
                                                   kMaxOrderedJsonObjectMembers, " members"));
  }
  if (scan.squared_members > kMaxOrderedJsonSquaredMembers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request JSON has too many object members in all: the sum over its objects of their "
        "members squared is ",
        scan.squared_members, ", over the limit of ", kMaxOrderedJsonSquaredMembers,
        " (four objects of ", kMaxOrderedJsonObjectMembers, " members)"));
  }
  if (scan.values_bound > kMaxRequestJsonValues) {
    return absl::InvalidArgumentError(
        absl::StrCat("request JSON has more than ", kMaxRequestJsonValues, " values"));
  }
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("request body is not valid JSON");
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body must be a JSON object, not ", JsonTypeName(j)));
  }
  return j;
}

absl::Status InvalidField(absl::string_view field, absl::string_view what) {
  return WithErrorParam(absl::InvalidArgumentError(absl::StrCat(field, " ", what)), field);
}

std::string JsonTypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    default:
      return "value";
  }
}

const Json* JsonFields::Get(absl::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string JsonFields::Name(absl::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

absl::StatusOr<std::optional<std::string>> JsonFields::String(absl::string_view key,
                                                              size_t max_bytes) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    return InvalidField(Name(key), absl::StrCat("must be a string, not ", JsonTypeName(*v)));
  }
  const std::string& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    return InvalidField(Name(key), absl::StrCat("is longer than ", max_bytes, " bytes"));
  }
  return s;
}

absl::StatusOr<std::optional<bool>> JsonFields::Bool(absl::string_view key) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    return InvalidField(Name(key), absl::StrCat("must be a boolean, not ", JsonTypeName(*v)));
  }
  return v->get<bool>();
}

absl::StatusOr<std::optional<double>> JsonFields::Number(absl::string_view key, double lo,
                                                         double hi) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    return InvalidField(Name(key), absl::StrCat("must be a number, not ", JsonTypeName(*v)));
  }
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return InvalidField(Name(key), absl::StrCat("must be between ", lo, " and ", hi));
  }
  return d;
}

absl::StatusOr<int64_t> JsonInteger(const Json& j, const std::string& name, int64_t lo,
                                    int64_t hi) {
  const std::string range = absl::StrCat("must be an integer between ", lo, " and ", hi);
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
      return InvalidField(name, range);
    }
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) {
    int64_t i = j.get<int64_t>();
    if (i < lo || i > hi) return InvalidField(name, range);
    return i;
  }
  if (j.is_number_float()) {
    // A whole number written as a float ("max_tokens": 100.0) is that integer, as OpenAI's API
    // and vLLM take it. Bounds are checked as doubles first: 2^63 and beyond, infinities and
    // NaN never reach the cast (NaN fails every comparison, hence the negated form).
    const double d = j.get<double>();
    if (!(d >= -0x1p63 && d < 0x1p63)) return InvalidField(name, range);
    if (std::trunc(d) != d) {
      return InvalidField(name, absl::StrCat(range, ", not a fraction"));
    }
    const auto i = static_cast<int64_t>(d);
    if (i < lo || i > hi) return InvalidField(name, range);
    return i;
  }
  return InvalidField(name, absl::StrCat(range, ", not ", JsonTypeName(j)));
}

absl::StatusOr<std::optional<int64_t>> JsonFields::Integer(absl::string_view key, int64_t lo,
                                                           int64_t hi) const {
  const Json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  absl::StatusOr<int64_t> i = JsonInteger(*v, Name(key), lo, hi);
  if (!i.ok()) return i.status();
  return *i;
}

absl::StatusOr<const Json*> JsonFields::Array(absl::string_view key, size_t max_items) const {
  const Json* v = Get(key);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) {
    return InvalidField(Name(key), absl::StrCat("must be an array, not ", JsonTypeName(*v)));
  }
  if (v->size() > max_items) {
    return InvalidField(Name(key), absl::StrCat("has more than ", max_items, " entries"));
  }
  return v;
}

absl::Status ForEachObject(const Json& array, const std::string& field, size_t max_items,
                           const std::function<absl::Status(const JsonFields&)>& fn) {
  if (!array.is_array()) {
    return InvalidField(field, absl::StrCat("must be an array, not ", JsonTypeName(array)));
  }
  if (array.size() > max_items) {
    return InvalidField(field, absl::StrCat("has more than ", max_items, " entries"));
  }
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string name = absl::StrCat(field, "[", i, "]");
    if (!array[i].is_object()) {
      return InvalidField(name, absl::StrCat("must be an object, not ", JsonTypeName(array[i])));
    }
    absl::Status s = fn(JsonFields(array[i], name));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<const Json*> JsonFields::Object(absl::string_view key) const {
  const Json* v = Get(key);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    return InvalidField(Name(key), absl::StrCat("must be an object, not ", JsonTypeName(*v)));
  }
  return v;
}

}  // namespace cairn::gateway
