#include "tools/cairnctl/completion_stream.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace cairn::cairnctl {

using Json = nlohmann::json;

bool CompletionStream::Feed(absl::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  bool first = false;
  for (size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
    std::string event = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    first |= HandleEvent(event);
  }
  return first;
}

// The readers below leave `*out` alone when `key` is absent; a value of the wrong type, or a
// number no count or duration can be, sets error_ (naming the field) and returns false. A
// gateway speaks for itself, so nothing it sends may end the replay (nlohmann's typed getters
// throw).
bool CompletionStream::ReadString(const Json& object, absl::string_view where,
                                  absl::string_view key, std::string* out) {
  const auto it = object.find(std::string(key));
  if (it == object.end()) return true;
  if (!it->is_string()) return BadField(where, key, "is not a string");
  *out = it->get_ref<const std::string&>();
  return true;
}

bool CompletionStream::ReadCount(const Json& object, absl::string_view where, absl::string_view key,
                                 int64_t* out) {
  const auto it = object.find(std::string(key));
  if (it == object.end()) return true;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(kMaxCount)) return BadField(where, key, "is out of range");
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  if (it->is_number_float()) {
    // 4096.0 is a count; 1e300, 0.5 and NaN are not (converting them to int64 is undefined).
    const double v = it->get<double>();
    if (!(std::fabs(v) <= static_cast<double>(kMaxCount)) || v != std::floor(v)) {
      return BadField(where, key, "is not a count");
    }
    *out = static_cast<int64_t>(v);
    return true;
  }
  return BadField(where, key, "is not a number");
}

bool CompletionStream::ReadMs(const Json& object, absl::string_view where, absl::string_view key,
                              double* out) {
  const auto it = object.find(std::string(key));
  if (it == object.end()) return true;
  if (!it->is_number()) return BadField(where, key, "is not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) return BadField(where, key, "is not a duration");
  *out = v;
  return true;
}

bool CompletionStream::BadField(absl::string_view where, absl::string_view key,
                                absl::string_view what) {
  error_ = absl::StrCat("malformed event: ", where, ".", key, " ", what);
  return false;
}

bool CompletionStream::HandleEvent(absl::string_view event) {
  std::string data;
  for (absl::string_view line : absl::StrSplit(event, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::ConsumePrefix(&line, "data:")) {
      absl::ConsumePrefix(&line, " ");
      absl::StrAppend(&data, line);
    }
  }
  if (data.empty()) return false;  // A comment (ping) or an event without data.
  if (data == "[DONE]") {
    done_ = true;
    return false;
  }
  Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = "malformed event";
    return false;
  }
  if (j.contains("error")) {
    const Json& e = j["error"];
    error_ = e.is_object() && e.contains("message") && e["message"].is_string()
                 ? e["message"].get<std::string>()
                 : std::string("error event");
    return false;
  }
  bool token = false;
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const Json& c = j["choices"][0];
    const bool text = c.contains("text") && c["text"].is_string() &&
                      !c["text"].get_ref<const std::string&>().empty();
    const bool finish = c.contains("finish_reason") && !c["finish_reason"].is_null();
    token = text || finish;
    finished_ |= finish;
  }
  if (j.contains("cairn") && j["cairn"].is_object()) {
    const Json& k = j["cairn"];
    have_cairn_ = true;
    if (!ReadString(k, "cairn", "tier", &tier_) || !ReadCount(k, "cairn", "depth", &depth_) ||
        !ReadCount(k, "cairn", "prefilled_tokens", &prefilled_) ||
        !ReadCount(k, "cairn", "captures", &captures_) ||
        !ReadMs(k, "cairn", "restore_ms", &restore_ms_) ||
        !ReadMs(k, "cairn", "capture_ms", &capture_ms_) ||
        !ReadMs(k, "cairn", "ttft_ms", &server_ttft_ms_)) {
      return false;
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const Json& u = j["usage"];
    if (!ReadCount(u, "usage", "completion_tokens", &completion_tokens_)) return false;
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
        !ReadCount(u["prompt_tokens_details"], "usage.prompt_tokens_details", "cached_tokens",
                   &reused_)) {
      return false;
    }
  }
  if (token && !first_token_) {
    first_token_ = true;
    return true;
  }
  return false;
}

void CompletionStream::Fill(cache::sim::ReplayRecord* r) const {
  r->tier = tier_;
  r->depth = depth_;
  r->prefilled = prefilled_;
  r->captures = captures_;
  r->restore_ms = restore_ms_;
  r->capture_ms = capture_ms_;
  r->server_ttft_ms = server_ttft_ms_;
  r->reused = reused_;
  r->completion_tokens = completion_tokens_;
  if (!error_.empty()) {
    r->error = error_;
  } else if (!finished_ || !have_cairn_) {
    r->error = "stream ended before the final event";
  }
}

}  // namespace cairn::cairnctl
