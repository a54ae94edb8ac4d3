#include "services/infer/daemon/generate_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/grpc_status.h"

namespace cairn::infer {
namespace {

// The length of the longest prefix of `s` that ends on a UTF-8 character boundary and is at
// most `n` bytes.
size_t Utf8Floor(const std::string& s, size_t n) {
  n = std::min(n, s.size());
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

v1::CacheResult::Tier ToProto(StateTier tier) {
  switch (tier) {
    case StateTier::kCold:
      return v1::CacheResult::TIER_UNSPECIFIED;
    case StateTier::kLive:
      return v1::CacheResult::TIER_LIVE;
    case StateTier::kRam:
      return v1::CacheResult::TIER_RAM;
    case StateTier::kDisk:
      return v1::CacheResult::TIER_DISK;
  }
  return v1::CacheResult::TIER_UNSPECIFIED;
}

}  // namespace

v1::CacheResult ToProto(const CacheReport& r) {
  v1::CacheResult out;
  out.set_restored_from(ToProto(r.tier));
  out.set_restored_depth(static_cast<uint64_t>(r.restored_depth));
  out.set_prefilled_tokens(static_cast<uint64_t>(r.prefilled_tokens));
  out.set_restore_ms(r.restore_ms);
  out.set_capture_ms(r.capture_ms);
  out.set_ttft_ms(r.ttft_ms);
  out.set_miss_reason(r.miss_reason);
  out.set_captures(static_cast<uint32_t>(r.captures));
  out.set_cache_available(r.cache_available);
  for (int64_t e : r.pass_ends) out.add_pass_ends(static_cast<uint64_t>(e));
  return out;
}

void GenerateReactor::Push(v1::GenerateResponse message) {
  bool start = false;
  {
    MutexLock lock(&mu_);
    if (broken_ || finish_called_) return;
    if (writing_) {
      const size_t bytes = message.ByteSizeLong();
      if (queued_bytes_ + bytes > max_queued_bytes_) {
        // The client is not keeping up: nothing more is queued for it.
        overrun_ = broken_ = true;
        queue_.clear();
        queued_bytes_ = 0;
        cancelled_.store(true);
        return;
      }
      queued_bytes_ += bytes;
      queue_.push_back(std::move(message));
      return;
    }
    writing_ = true;
    current_ = std::move(message);
    start = true;
  }
  if (start) StartWrite(&current_);
}

void GenerateReactor::Close(const grpc::Status& status) {
  bool finish = false;
  grpc::Status final_status;
  {
    MutexLock lock(&mu_);
    closing_ = true;
    final_status_ =
        overrun_ ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                absl::StrCat("the client read the stream too slowly: "
                                             "more than ",
                                             max_queued_bytes_, " bytes of messages waited for it"))
                 : status;
    if (!writing_ && !finish_called_) finish = finish_called_ = true;
    final_status = final_status_;
  }
  if (finish) Finish(final_status);
}

void GenerateReactor::OnWriteDone(bool ok) {
  bool write = false;
  bool finish = false;
  grpc::Status status;
  {
    MutexLock lock(&mu_);
    if (!ok) {
      broken_ = true;
      queue_.clear();
      queued_bytes_ = 0;
    }
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= std::min(queued_bytes_, current_.ByteSizeLong());
      write = true;
    } else {
      writing_ = false;
      if (closing_ && !finish_called_) {
        finish = finish_called_ = true;
        status = final_status_;
      }
    }
  }
  if (write) StartWrite(&current_);
  if (finish) Finish(status);
}

GenerateSink::GenerateSink(GenerateReactor* reactor, GenerateSinkOptions options)
    : reactor_(reactor), options_(std::move(options)) {
  if (options_.tokenizer != nullptr) decoder_.emplace(options_.tokenizer, /*skip_special=*/true);
  if (options_.parse_output) parser_.emplace(options_.parser);
  for (const std::string& s : options_.stop) max_stop_ = std::max(max_stop_, s.size());
}

void GenerateSink::OnStarted(const StartInfo& info) {
  v1::GenerateResponse r;
  v1::Started* s = r.mutable_started();
  s->set_request_id(options_.request_id);
  s->set_prompt_tokens(static_cast<uint32_t>(info.prompt_tokens));
  *s->mutable_cache() = ToProto(info.cache);
  s->set_slot(static_cast<uint32_t>(info.slot));
  reactor_->Push(std::move(r));
}

std::string GenerateSink::TokenText(int32_t id) const {
  if (options_.tokenizer == nullptr) return "";
  absl::StatusOr<std::string> t = options_.tokenizer->Decode(absl::MakeConstSpan(&id, 1));
  return t.ok() ? *t : "";
}

std::string GenerateSink::TokenBytes(int32_t id) const {
  if (options_.tokenizer == nullptr) return "";
  absl::StatusOr<std::string> t = options_.tokenizer->DecodeBytes(absl::MakeConstSpan(&id, 1));
  return t.ok() ? *t : "";
}

int64_t GenerateSink::ReasoningTokens() const {
  if (!options_.parse_output || !options_.parser.parse_reasoning) return 0;
  const text::OutputParserOptions& p = options_.parser;
  size_t begin = 0;
  if (!p.starts_in_reasoning) {
    // As the parser reads it: only a block at the answer's start (after whitespace at most).
    begin = text_.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos ||
        text_.compare(begin, p.think_open.size(), p.think_open) != 0) {
      return 0;
    }
  }
  const size_t close =
      text_.find(p.think_close, p.starts_in_reasoning ? 0 : begin + p.think_open.size());
  const size_t end = close == std::string::npos ? text_.size() : close + p.think_close.size();
  // A token counts when its text overlaps [begin, end), or it added no text inside it (bytes of
  // a character still being completed).
  int64_t n = 0;
  size_t start = 0;
  for (size_t stop : token_text_ends_) {
    if ((stop > begin && start < end) || (start == stop && start >= begin && start < end)) ++n;
    start = stop;
  }
  return n;
}

bool GenerateSink::OnToken(const SampledToken& token) {
  std::vector<v1::TokenLogprob> logprobs;
  if (options_.logprobs > 0) {
    v1::TokenLogprob lp;
    lp.set_token_id(static_cast<uint32_t>(token.id));
    lp.set_text(TokenText(token.id));
    lp.set_token_bytes(TokenBytes(token.id));
    lp.set_logprob(token.logprob);
    for (const auto& [id, value] : token.top) {
      v1::TokenLogprob::Alternative* alt = lp.add_top();
      alt->set_token_id(static_cast<uint32_t>(id));
      alt->set_text(TokenText(id));
      alt->set_token_bytes(TokenBytes(id));
      alt->set_logprob(value);
    }
    logprobs.push_back(std::move(lp));
  }
  std::vector<uint32_t> ids = {static_cast<uint32_t>(token.id)};
  if (!decoder_.has_value()) {
    Emit(text_.size(), std::move(ids), std::move(logprobs));
    return true;
  }
  absl::StatusOr<std::string> piece = decoder_->Push(token.id);
  if (piece.ok()) text_ += *piece;
  token_text_ends_.push_back(text_.size());
  // A stop string ends the output where it starts; search only where a new match can be. Of
  // strings matching at the same place, the first given wins.
  const size_t from = emitted_ > max_stop_ ? emitted_ - max_stop_ : 0;
  size_t stop_at = std::string::npos;
  for (const std::string& s : options_.stop) {
    const size_t p = text_.find(s, from);
    if (p != std::string::npos && p < stop_at) {
      stop_at = p;
      stop_sequence_ = s;
    }
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    Emit(std::max(stop_at, emitted_), std::move(ids), std::move(logprobs));
    return false;
  }
  // Hold back what may still become a stop string.
  const size_t hold = max_stop_ > 0 ? max_stop_ - 1 : 0;
  const size_t end = text_.size() > hold ? Utf8Floor(text_, text_.size() - hold) : 0;
  Emit(std::max(end, emitted_), std::move(ids), std::move(logprobs));
  return true;
}

void GenerateSink::Emit(size_t end, std::vector<uint32_t> ids,
                        std::vector<v1::TokenLogprob> logprobs) {
  v1::GenerateResponse r;
  v1::Delta* d = r.mutable_delta();
  for (uint32_t id : ids) d->add_token_ids(id);
  for (v1::TokenLogprob& lp : logprobs) *d->add_logprobs() = std::move(lp);
  const size_t begin = emitted_;
  emitted_ = end;
  if (!parser_.has_value()) {
    d->set_text(text_.substr(begin, end - begin));
    reactor_->Push(std::move(r));
    return;
  }
  // A Delta's fields cannot say whether a tool call came before or after the text beside it,
  // and text is read as coming first: a piece is cut after every tool call's closing tag that
  // ends inside it (one held back behind a stop string can hold a call and the text after it),
  // a Delta a part. The first carries the piece's ids and logprobs.
  const std::string& close = options_.parser.tool_close;
  std::vector<size_t> cuts;
  if (!close.empty()) {
    size_t at = text_.find(close, begin >= close.size() ? begin - close.size() + 1 : 0);
    for (; at != std::string::npos && at + close.size() < end; at = text_.find(close, at + 1)) {
      if (at + close.size() > begin) cuts.push_back(at + close.size());
    }
  }
  cuts.push_back(end);
  size_t from = begin;
  for (size_t i = 0; i < cuts.size(); ++i) {
    text::ParsedOutput out = parser_->Push(text_.substr(from, cuts[i] - from));
    from = cuts[i];
    const bool empty =
        out.content.empty() && out.reasoning_content.empty() && out.tool_calls.empty();
    if (i > 0 && empty) continue;
    v1::GenerateResponse part;
    v1::Delta* pd = i == 0 ? d : part.mutable_delta();
    pd->set_text(out.content);
    pd->set_reasoning_text(out.reasoning_content);
    for (const text::ToolCall& call : out.tool_calls) {
      v1::ToolCallDelta* t = pd->add_tool_calls();
      t->set_index(static_cast<uint32_t>(tool_calls_++));
      t->set_id(call.id);
      t->set_name(call.name);
      t->set_arguments_delta(call.arguments);
    }
    parsed_.Append(std::move(out));
    reactor_->Push(i == 0 ? std::move(r) : std::move(part));
  }
}

void GenerateSink::OnFinished(const absl::Status& status, const FinishInfo& info) {
  if (!status.ok() && !absl::IsCancelled(status)) {
    reactor_->Close(ToGrpcStatus(status));
    return;
  }
  if (absl::IsCancelled(status) && reactor_->cancelled()) {
    reactor_->Close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    return;
  }
  if (absl::IsCancelled(status)) {
    // Cancelled by the daemon (SIGTERM's drain deadline passed), not by the client: the answer
    // is cut short, and a Finished with an OK status would pass it off as whole (the gateway
    // answered finish_reason "stop"). A retryable error instead.
    reactor_->Close(grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("cairn-infer is shutting down: the request was cancelled at the drain "
                     "deadline after ",
                     info.completion_tokens, " tokens; retry it")));
    return;
  }
  // Whatever text is still held back (and not cut by a stop string) is output now.
  if (!stopped_ && decoder_.has_value()) text_ += decoder_->Flush();
  if (emitted_ < text_.size() && !stopped_) Emit(text_.size(), {}, {});
  v1::GenerateResponse r;
  v1::Finished* f = r.mutable_finished();
  if (parser_.has_value()) {
    text::ParsedOutput tail = parser_->Finish();
    if (!tail.content.empty() || !tail.reasoning_content.empty() || !tail.tool_calls.empty()) {
      v1::GenerateResponse last;
      v1::Delta* d = last.mutable_delta();
      d->set_text(tail.content);
      d->set_reasoning_text(tail.reasoning_content);
      for (const text::ToolCall& call : tail.tool_calls) {
        v1::ToolCallDelta* t = d->add_tool_calls();
        t->set_index(static_cast<uint32_t>(tool_calls_++));
        t->set_id(call.id);
        t->set_name(call.name);
        t->set_arguments_delta(call.arguments);
      }
      reactor_->Push(std::move(last));
    }
    parsed_.Append(std::move(tail));
    f->set_content(parsed_.content);
    f->set_reasoning_content(parsed_.reasoning_content);
    for (const text::ToolCall& call : parsed_.tool_calls) {
      v1::ToolCall* t = f->add_tool_calls();
      t->set_id(call.id);
      t->set_name(call.name);
      t->set_arguments_json(call.arguments);
    }
    std::string warnings;
    for (const std::string& w : parsed_.warnings) warnings += (warnings.empty() ? "" : "; ") + w;
    f->set_parse_warning(warnings);
  }
  switch (info.reason) {
    case FinishReason::kStop:
      f->set_reason(parsed_.tool_calls.empty() ? v1::Finished::REASON_STOP
                                               : v1::Finished::REASON_TOOL_CALLS);
      break;
    case FinishReason::kLength:
      f->set_reason(v1::Finished::REASON_LENGTH);
      break;
    case FinishReason::kCancelled:
      f->set_reason(v1::Finished::REASON_CANCELLED);
      break;
  }
  f->set_prompt_tokens(static_cast<uint32_t>(info.prompt_tokens));
  f->set_completion_tokens(static_cast<uint32_t>(info.completion_tokens));
  f->set_cached_tokens(static_cast<uint32_t>(info.cache.restored_depth));
  *f->mutable_cache() = ToProto(info.cache);
  f->set_decode_tokens_per_s(info.decode_tokens_per_s);
  if (stopped_ && info.reason == FinishReason::kStop) f->set_stop_sequence(stop_sequence_);
  f->set_reasoning_tokens(static_cast<uint32_t>(ReasoningTokens()));
  reactor_->Push(std::move(r));
  reactor_->Close(grpc::Status::OK);
}

}  // namespace cairn::infer
