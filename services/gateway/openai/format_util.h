#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_FORMAT_UTIL_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_FORMAT_UTIL_H_

// Pieces every API shape shares: the `cairn` cache object, SSE framing, ids, the common
// request limits, and the interface that turns a Generate stream into an API's response.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cairn/infer/v1/infer.pb.h"
#include "services/gateway/openai/json_util.h"

namespace cairn::gateway {

namespace infer_v1 = ::cairn::infer::v1;

// cairn-infer's limit on one stop string (InferServiceOptions::max_stop_bytes in
// services/infer/daemon/infer_service.h), mirrored because services share only proto/: a longer
// one must be refused here, naming the client's field, not by the daemon naming its own.
inline constexpr size_t kInferMaxStopBytes = 256;

// Bounds on request fields (GW4). Every number is a named default with a flag in main.cc.
struct RequestLimits {
  size_t max_messages = 4096;         // Chat messages / input items.
  size_t max_content_parts = 1024;    // Parts in one message's content.
  size_t max_string_bytes = 4 << 20;  // One string field.
  size_t max_tools = 512;
  size_t max_stop = 16;  // Stop strings.
  // One stop string.
  size_t max_stop_bytes = kInferMaxStopBytes;
  size_t max_prompt_token_ids = 1 << 20;  // Token ids in one prompt.
  int64_t max_tokens_limit = 1 << 24;     // Largest max_tokens accepted at all.
  uint32_t max_top_logprobs = 20;         // OpenAI's own limit.
  uint32_t max_output_tokens = 0;         // Server-side cap on each request's output; 0: none.
  int max_json_depth = 64;
};

// Returns the tier name of the `cairn` object: "cold", "live", "ram" or "disk".
absl::string_view TierName(infer_v1::CacheResult::Tier tier);
// Returns the `cairn` object every response carries (docs/architecture.md §7).
Json CairnObject(const infer_v1::CacheResult& cache);

// "data: <json>\n\n" and "event: <name>\ndata: <json>\n\n".
std::string SseData(const Json& j);
std::string SseEvent(absl::string_view name, const Json& j);

// Returns `prefix` followed by 24 random hex digits ("chatcmpl-3f..."), from absl::BitGen
// (seeded from absl's process-wide entropy pool, which the OS seeds).
std::string NewId(absl::string_view prefix);

// The ids of one response's tool calls. The daemon numbers a response's calls call_0, call_1,
// ..., which repeat in every turn of a conversation, while clients match results to calls by
// id; so each call gets a random id here, `prefix` and 24 hex digits (NewId), made when the call
// is first seen and the same in all its deltas, stream events and the whole body.
// Thread-compatible.
class ToolCallIds {
 public:
  explicit ToolCallIds(std::string prefix) : prefix_(std::move(prefix)) {}
  // Returns the id of the response's call number `index` (the daemon's ToolCallDelta.index, or
  // the call's place in Finished.tool_calls).
  const std::string& For(uint32_t index);

 private:
  std::string prefix_;
  std::map<uint32_t, std::string> ids_;
};
// Seconds since the epoch.
int64_t UnixSeconds();

// Sets `sampling`'s max_tokens from the client's `requested` (0: none asked) and the server's
// output cap: absent (up to the context limit) when neither gives one; the client's value where
// it is within the cap (the daemon refuses one larger than the context leaves, as OpenAI
// does); else the cap, as a ceiling the context's room may lower (max_tokens_is_ceiling), so
// that a prompt near the context's end still gets its answer.
void SetMaxTokens(int64_t requested, const RequestLimits& limits,
                  infer_v1::SamplingParams* sampling);

// Turns one Generate stream into an API's response. Thread-compatible: one request's
// messages arrive in order on one strand.
class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  // Streaming: the bytes to send for each message ("" for nothing).
  virtual std::string StreamStarted(const infer_v1::Started& started) = 0;
  virtual std::string StreamDelta(const infer_v1::Delta& delta) = 0;
  virtual std::string StreamFinished(const infer_v1::Finished& finished) = 0;
  // An error after the stream has begun; the stream ends after it.
  virtual std::string StreamError(const absl::Status& status) = 0;
  // What a heartbeat tick sends while nothing else was (a long prefill, a tool call held until
  // it closes): an SSE comment, unless the API's clients need events.
  virtual std::string StreamHeartbeat() { return ": ping\n\n"; }
  // Non-streaming: each delta is collected, then the body is built from Finished.
  virtual void Collect(const infer_v1::Delta& delta) = 0;
  virtual Json Body(const infer_v1::Finished& finished) = 0;
};

// The content and reasoning of a non-streamed answer: the daemon's parsed whole from Finished
// when it sent one, else what the deltas carried. Thread-compatible.
class CollectedOutput {
 public:
  void Add(const infer_v1::Delta& delta);
  const std::string& text(const infer_v1::Finished& f) const {
    return f.content().empty() ? text_ : f.content();
  }
  const std::string& reasoning(const infer_v1::Finished& f) const {
    return f.reasoning_content().empty() ? reasoning_ : f.reasoning_content();
  }
  const google::protobuf::RepeatedPtrField<infer_v1::TokenLogprob>& logprobs() const {
    return logprobs_;
  }

 private:
  std::string text_;
  std::string reasoning_;
  google::protobuf::RepeatedPtrField<infer_v1::TokenLogprob> logprobs_;
};

// A parsed generation request, ready to send once its model is resolved.
struct GenerationSpec {
  std::string model;  // As requested ("" when absent).
  bool stream = false;
  std::string content_type = "text/event-stream";  // Of the streamed response.
  infer_v1::GenerateRequest request;
  uint32_t top_logprobs = 0;  // Checked against the vocabulary once the model is known.
  // Builds the formatter for the served model's name.
  std::function<std::unique_ptr<ResponseFormatter>(const std::string& model)> make_formatter;
};

// Checks what depends on the model: token ids, stop token ids and top_logprobs below
// `vocab_size`. InvalidArgument naming the field.
absl::Status CheckAgainstVocabulary(const GenerationSpec& spec, uint32_t vocab_size);

// Where an OpenAI json_schema format keeps its members ("name", "schema", "strict",
// "description").
enum class SchemaMembers {
  kNested,  // In the format's "json_schema" object (chat completions' response_format).
  kInline,  // In the format object itself (the Responses API's text.format).
};

// Reads the members of a json_schema format from `f` (chat's response_format.json_schema, the
// Responses API's text.format, Anthropic's output_format) into `format`: "name" (required when
// `name_required`, as OpenAI requires it: 1 to 64 letters, digits, '_' or '-'; it never reaches
// the model), "description" (a string; not shown to the model), "strict" (a boolean; decoding
// is constrained either way) and "schema" (an object, sent as its JSON text; absent: "{}", any
// JSON value, as the empty JSON Schema). InvalidArgument naming the field.
absl::Status ReadJsonSchemaFormat(const JsonFields& f, bool name_required,
                                  infer_v1::ResponseFormat* format);

// Reads an OpenAI response format, `format`, named `field` ("response_format", "text.format"):
// {"type": "text"} (or no type) leaves `request` free text; {"type": "json_object"} asks for any
// JSON object; {"type": "json_schema", ...} for a value valid under a schema, its members where
// `members` says. InvalidArgument naming the field for another type or a bad member.
absl::Status ParseOpenAiResponseFormat(const Json& format, const std::string& field,
                                       SchemaMembers members, infer_v1::GenerateRequest* request);

// Checks that a request with a response format (named `field` in the client's request) can
// have its answer constrained from the first token: it neither forces a tool call
// (`tool_choice`), nor continues a final assistant message (`prefill` names how the client
// asked for that), nor ignores EOS. InvalidArgument naming both fields; Ok without a format.
// Call once the request's other fields are read.
absl::Status CheckResponseFormatFits(const infer_v1::GenerateRequest& request,
                                     absl::string_view field, absl::string_view prefill);

// Returns a label grouping the requests of one conversation, used to route them to the
// daemon already holding it: `cache_key` when given, else a hash of the first messages.
std::string ConversationLabel(absl::string_view cache_key, const infer_v1::ChatPrompt& chat);
// Returns the label for a client's `cache_key`: its first kCacheKeyLabelBytes bytes, cut on a
// UTF-8 character boundary (the label travels in a proto3 string, which must be valid UTF-8).
// cairn-infer takes labels of up to 256 bytes.
inline constexpr size_t kCacheKeyLabelBytes = 128;
std::string CacheKeyLabel(absl::string_view cache_key);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_FORMAT_UTIL_H_
