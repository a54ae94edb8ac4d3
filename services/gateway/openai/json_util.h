#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_JSON_UTIL_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_JSON_UTIL_H_

// Reading untrusted JSON without exceptions: every accessor checks type and range and
// returns InvalidArgument naming the field ("messages[2].content"), in its message and as the
// error's "param" (InvalidField), so that no nlohmann type_error can be thrown from our code.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace cairn::gateway {

// Ordered: objects keep their members in the client's order (the order a tool's or a response
// format's schema reaches the model in; objects of more than kMaxOrderedJsonObjectMembers, and
// bodies whose objects' members squared add up to more than kMaxOrderedJsonSquaredMembers, are
// refused by ParseJsonObject, since inserting a member searches the ones before it).
using Json = nlohmann::ordered_json;

// Serializes `j` compactly; never throws (invalid UTF-8 is replaced with U+FFFD).
std::string DumpJson(const Json& j);

// The most values a request body may parse to (JsonObjectScan::values_bound): a parse allocates
// about 100 bytes a value, so an 8 MiB body of `[[],[],...]` took 260 MB to parse, while a
// long agent conversation with its tools holds some tens of thousands.
inline constexpr int64_t kMaxRequestJsonValues = int64_t{1} << 19;

// Parses `body` as one JSON object nested at most `max_depth` deep. InvalidArgument when the
// body is empty, not JSON, too deep, not an object, or too costly to parse (an object of too
// many members or too many members in all, which an ordered parse pays for quadratically:
// common/json/json_scan.h; more than kMaxRequestJsonValues values).
absl::StatusOr<Json> ParseJsonObject(absl::string_view body, int max_depth);

// Returns InvalidArgument "<field> <what>" for the request field `field`, its path as OpenAI
// writes it ("temperature", "messages[2].content", "tools[0].function.name"), also attached as
// the error's param (WithErrorParam, errors.h), which OpenAI's error body names in "param".
// Every OpenAI route's error about one request field is made here (Anthropic's body has no
// param, and its mapping words its own errors).
absl::Status InvalidField(absl::string_view field, absl::string_view what);

// Returns the JSON type name used in messages ("string", "array", ...).
std::string JsonTypeName(const Json& j);

// Typed, bounded reads from one JSON object. A missing key and an explicit null read as
// absent. Thread-compatible; `object` must outlive this reader.
class JsonFields {
 public:
  // `path` names the object in messages ("" for the request itself, "messages[2]", ...).
  JsonFields(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  // Returns the value at `key`, or nullptr when absent or null.
  const Json* Get(absl::string_view key) const;
  // The object's name in messages.
  const std::string& path() const { return path_; }
  // Returns the field's name for messages: "path.key" (or "key" at the top).
  std::string Name(absl::string_view key) const;

  absl::StatusOr<std::optional<std::string>> String(absl::string_view key, size_t max_bytes) const;
  absl::StatusOr<std::optional<bool>> Bool(absl::string_view key) const;
  // A finite number in [lo, hi]; integers are accepted.
  absl::StatusOr<std::optional<double>> Number(absl::string_view key, double lo, double hi) const;
  // An integer in [lo, hi], also written as a whole float (100.0); a fraction, a string, or
  // a float out of range (1e300) is an error.
  absl::StatusOr<std::optional<int64_t>> Integer(absl::string_view key, int64_t lo,
                                                 int64_t hi) const;
  // An array (nullptr when absent) with at most `max_items` entries.
  absl::StatusOr<const Json*> Array(absl::string_view key, size_t max_items) const;
  // An object (nullptr when absent).
  absl::StatusOr<const Json*> Object(absl::string_view key) const;

 private:
  const Json& object_;
  std::string path_;
};

// Calls `fn` with a reader for each entry of `array` (named `field`), which must be an array
// of at most `max_items` objects. Stops at the first error.
absl::Status ForEachObject(const Json& array, const std::string& field, size_t max_items,
                           const std::function<absl::Status(const JsonFields&)>& fn);

// Reads `j` (named `name`) as an integer in [lo, hi]: a JSON integer, or a float that is
// exactly one (100.0, 1e2).
absl::StatusOr<int64_t> JsonInteger(const Json& j, const std::string& name, int64_t lo, int64_t hi);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_JSON_UTIL_H_
