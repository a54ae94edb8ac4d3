#include "tools/cairnctl/completion_stream.h"

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
    tier_ = k.value("tier", std::string("cold"));
    depth_ = k.value("depth", int64_t{0});
    prefilled_ = k.value("prefilled_tokens", int64_t{0});
    captures_ = k.value("captures", int64_t{0});
    restore_ms_ = k.value("restore_ms", 0.0);
    capture_ms_ = k.value("capture_ms", 0.0);
    server_ttft_ms_ = k.value("ttft_ms", 0.0);
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const Json& u = j["usage"];
    completion_tokens_ = u.value("completion_tokens", int64_t{0});
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      reused_ = u["prompt_tokens_details"].value("cached_tokens", int64_t{0});
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
