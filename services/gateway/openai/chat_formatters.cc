#include "services/gateway/openai/chat_formatters.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {
namespace {

constexpr double kNoLogprob = -9999.0;  // OpenAI's logprob of an impossible token.

// OpenAI's logprob "bytes": the token's UTF-8 bytes as integers (null when unknown).
Json Bytes(const std::string& raw) {
  if (raw.empty()) return nullptr;
  Json out = Json::array();
  for (unsigned char c : raw) out.push_back(static_cast<int>(c));
  return out;
}

// A logprob as written in JSON. A token the model gives no probability (-inf) or an undefined
// one (NaN) is written as -9999.0, as OpenAI writes impossible tokens: JSON has no infinity,
// and the null nlohmann would write breaks SDKs that read a number.
double LogprobValue(float logprob) { return std::isfinite(logprob) ? logprob : kNoLogprob; }

// The daemon always sends at least one alternative per token (it is asked for at least one, so
// that the chosen token's logprob comes back); `top_n` keeps what the client asked for.
Json LogprobsContent(const google::protobuf::RepeatedPtrField<infer_v1::TokenLogprob>& lps,
                     uint32_t top_n) {
  Json content = Json::array();
  for (const auto& lp : lps) {
    Json top = Json::array();
    for (const auto& alt : lp.top()) {
      if (top.size() >= top_n) break;
      top.push_back({{"token", alt.text()},
                     {"logprob", LogprobValue(alt.logprob())},
                     {"bytes", Bytes(alt.token_bytes())}});
    }
    content.push_back({{"token", lp.text()},
                       {"logprob", LogprobValue(lp.logprob())},
                       {"bytes", Bytes(lp.token_bytes())},
                       {"top_logprobs", top}});
  }
  return content;
}

// chat.completion and chat.completion.chunk.
class ChatFormatter : public ResponseFormatter {
 public:
  ChatFormatter(std::string model, bool include_usage, bool logprobs, uint32_t top_logprobs)
      : id_(NewId("chatcmpl-")),
        model_(std::move(model)),
        created_(UnixSeconds()),
        include_usage_(include_usage),
        logprobs_(logprobs),
        top_logprobs_(top_logprobs) {}

  std::string StreamStarted(const infer_v1::Started&) override {
    Json delta = {{"role", "assistant"}, {"content", ""}};
    return SseData(Chunk(delta, nullptr));
  }

  std::string StreamDelta(const infer_v1::Delta& d) override {
    Json delta = Json::object();
    if (!d.reasoning_text().empty()) delta["reasoning_content"] = d.reasoning_text();
    if (!d.text().empty()) delta["content"] = d.text();
    if (d.tool_calls_size() > 0) {
      Json calls = Json::array();
      for (const auto& tc : d.tool_calls()) {
        Json c = {{"index", tc.index()}};
        if (!tc.id().empty()) {  // The call's first delta.
          c["id"] = tool_ids_.For(tc.index());
          c["type"] = "function";
        }
        Json fn = Json::object();
        if (!tc.name().empty()) fn["name"] = tc.name();
        fn["arguments"] = tc.arguments_delta();
        c["function"] = fn;
        calls.push_back(c);
      }
      delta["tool_calls"] = calls;
    }
    if (delta.empty() && !(logprobs_ && d.logprobs_size() > 0)) return "";
    Json chunk = Chunk(delta, nullptr);
    if (logprobs_ && d.logprobs_size() > 0) {
      chunk["choices"][0]["logprobs"] = {{"content", LogprobsContent(d.logprobs(), top_logprobs_)}};
    }
    return SseData(chunk);
  }

  std::string StreamFinished(const infer_v1::Finished& f) override {
    Json last = Chunk(Json::object(), FinishReasonName(f.reason()));
    last["cairn"] = CairnObject(f.cache());
    std::string out = SseData(last);
    if (include_usage_) {
      Json usage = Chunk(Json::object(), nullptr);
      usage["choices"] = Json::array();
      usage["usage"] = UsageObject(f);
      usage["cairn"] = CairnObject(f.cache());
      absl::StrAppend(&out, SseData(usage));
    }
    absl::StrAppend(&out, "data: [DONE]\n\n");
    return out;
  }

  std::string StreamError(const absl::Status& status) override {
    return absl::StrCat("data: ", OpenAiErrorJson(status, "messages"), "\n\ndata: [DONE]\n\n");
  }

  void Collect(const infer_v1::Delta& d) override { collected_.Add(d); }

  Json Body(const infer_v1::Finished& f) override {
    Json message = {{"role", "assistant"}};
    const std::string& content = collected_.text(f);
    const std::string& reasoning = collected_.reasoning(f);
    message["content"] = content.empty() && f.tool_calls_size() > 0 ? Json(nullptr) : Json(content);
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    if (f.tool_calls_size() > 0) {
      Json calls = Json::array();
      for (int i = 0; i < f.tool_calls_size(); ++i) {
        const infer_v1::ToolCall& tc = f.tool_calls(i);
        calls.push_back({{"id", tool_ids_.For(static_cast<uint32_t>(i))},
                         {"type", "function"},
                         {"function", {{"name", tc.name()}, {"arguments", tc.arguments_json()}}}});
      }
      message["tool_calls"] = calls;
    }
    Json choice = {{"index", 0},
                   {"message", message},
                   {"finish_reason", FinishReasonName(f.reason())},
                   {"logprobs", nullptr}};
    if (logprobs_)
      choice["logprobs"] = {{"content", LogprobsContent(collected_.logprobs(), top_logprobs_)}};
    return {{"id", id_},
            {"object", "chat.completion"},
            {"created", created_},
            {"model", model_},
            {"choices", Json::array({choice})},
            {"usage", UsageObject(f)},
            {"cairn", CairnObject(f.cache())}};
  }

 private:
  Json Chunk(Json delta, Json finish_reason) const {
    return {{"id", id_},
            {"object", "chat.completion.chunk"},
            {"created", created_},
            {"model", model_},
            {"choices", Json::array({{{"index", 0},
                                      {"delta", std::move(delta)},
                                      {"logprobs", nullptr},
                                      {"finish_reason", std::move(finish_reason)}}})}};
  }

  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const bool include_usage_;
  const bool logprobs_;
  const uint32_t top_logprobs_;  // Alternatives per token the client asked for.
  CollectedOutput collected_;
  ToolCallIds tool_ids_{"call_"};
};

// text_completion objects (legacy completions).
class CompletionFormatter : public ResponseFormatter {
 public:
  CompletionFormatter(std::string model, bool include_usage, bool logprobs, uint32_t top_logprobs,
                      bool token_ids)
      : id_(NewId("cmpl-")),
        model_(std::move(model)),
        created_(UnixSeconds()),
        include_usage_(include_usage),
        logprobs_(logprobs),
        top_logprobs_(top_logprobs),
        token_ids_(token_ids) {}

  std::string StreamStarted(const infer_v1::Started&) override { return ""; }
  std::string StreamDelta(const infer_v1::Delta& d) override {
    if (d.text().empty() && d.logprobs_size() == 0 && (!token_ids_ || d.token_ids_size() == 0)) {
      return "";
    }
    Json chunk = Object(d.text(), nullptr);
    if (logprobs_) chunk["choices"][0]["logprobs"] = LegacyLogprobs(d.logprobs(), top_logprobs_);
    if (token_ids_) {
      chunk["choices"][0]["token_ids"] =
          std::vector<uint32_t>(d.token_ids().begin(), d.token_ids().end());
    }
    return SseData(chunk);
  }
  std::string StreamFinished(const infer_v1::Finished& f) override {
    Json last = Object("", FinishReasonName(f.reason()));
    last["cairn"] = CairnObject(f.cache());
    std::string out = SseData(last);
    if (include_usage_) {
      // As OpenAI (and the chat formatter): a chunk of its own, with no choices, before [DONE].
      Json usage = Object("", nullptr);
      usage["choices"] = Json::array();
      usage["usage"] = UsageObject(f);
      usage["cairn"] = CairnObject(f.cache());
      absl::StrAppend(&out, SseData(usage));
    }
    absl::StrAppend(&out, "data: [DONE]\n\n");
    return out;
  }
  std::string StreamError(const absl::Status& status) override {
    return absl::StrCat("data: ", OpenAiErrorJson(status, "prompt"), "\n\ndata: [DONE]\n\n");
  }
  void Collect(const infer_v1::Delta& d) override {
    collected_.Add(d);
    ids_.insert(ids_.end(), d.token_ids().begin(), d.token_ids().end());
  }
  Json Body(const infer_v1::Finished& f) override {
    Json body = Object(collected_.text(f), FinishReasonName(f.reason()));
    if (logprobs_)
      body["choices"][0]["logprobs"] = LegacyLogprobs(collected_.logprobs(), top_logprobs_);
    if (token_ids_) body["choices"][0]["token_ids"] = ids_;
    body["usage"] = UsageObject(f);
    body["cairn"] = CairnObject(f.cache());
    return body;
  }

 private:
  Json Object(const std::string& text, Json finish_reason) const {
    return {{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", Json::array({{{"index", 0},
                                      {"text", text},
                                      {"logprobs", nullptr},
                                      {"finish_reason", std::move(finish_reason)}}})}};
  }
  // As OpenAI's legacy completions: at most `top_n` alternatives per token, and the sampled
  // token too where they do not hold it ("up to logprobs + 1" entries; one for logprobs 0).
  static Json LegacyLogprobs(const google::protobuf::RepeatedPtrField<infer_v1::TokenLogprob>& lps,
                             uint32_t top_n) {
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array();
    for (const auto& lp : lps) {
      tokens.push_back(lp.text());
      token_logprobs.push_back(LogprobValue(lp.logprob()));
      Json alts = Json::object();
      for (const auto& alt : lp.top()) {
        if (alts.size() >= top_n) break;
        alts[alt.text()] = LogprobValue(alt.logprob());
      }
      if (!alts.contains(lp.text())) alts[lp.text()] = LogprobValue(lp.logprob());
      top.push_back(alts);
    }
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
  }

  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const bool include_usage_;
  const bool logprobs_;
  const uint32_t top_logprobs_;  // Alternatives per token the client asked for.
  const bool token_ids_;
  CollectedOutput collected_;
  std::vector<uint32_t> ids_;  // Generated token ids (non-streaming, when asked for).
};

}  // namespace

std::unique_ptr<ResponseFormatter> NewChatFormatter(std::string model, bool include_usage,
                                                    bool logprobs, uint32_t top_logprobs) {
  return std::make_unique<ChatFormatter>(std::move(model), include_usage, logprobs, top_logprobs);
}

std::unique_ptr<ResponseFormatter> NewCompletionFormatter(std::string model, bool include_usage,
                                                          bool logprobs, uint32_t top_logprobs,
                                                          bool token_ids) {
  return std::make_unique<CompletionFormatter>(std::move(model), include_usage, logprobs,
                                               top_logprobs, token_ids);
}

absl::string_view FinishReasonName(infer_v1::Finished::Reason reason) {
  switch (reason) {
    case infer_v1::Finished::REASON_LENGTH:
      return "length";
    case infer_v1::Finished::REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "stop";
  }
}

Json UsageObject(const infer_v1::Finished& f) {
  return {{"prompt_tokens", f.prompt_tokens()},
          {"completion_tokens", f.completion_tokens()},
          {"total_tokens", static_cast<uint64_t>(f.prompt_tokens()) + f.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", f.cached_tokens()}}},
          {"completion_tokens_details", {{"reasoning_tokens", f.reasoning_tokens()}}}};
}

}  // namespace cairn::gateway
