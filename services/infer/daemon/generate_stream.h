#ifndef CAIRN_SERVICES_INFER_DAEMON_GENERATE_STREAM_H_
#define CAIRN_SERVICES_INFER_DAEMON_GENERATE_STREAM_H_

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "grpcpp/grpcpp.h"
#include "services/infer/engine/request.h"
#include "services/infer/text/output_parser.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer {

// The server side of one Generate stream: writes GenerateResponse messages one at a time, in
// order, and finishes the call once the last one is written. Deletes itself in OnDone.
//
// Thread-safe: Push and Close may be called from any thread (the scheduler's), reactions run on
// gRPC's threads. StartWrite and Finish are never called with the lock held (gRPC may run
// reactions inline). The object stays alive until Finish completes, and only Close leads to
// Finish, so a caller that has not yet called Close may use it.
//
// A client that reads slower than messages come makes them wait here; once more than
// `max_queued_bytes` wait, the queue is dropped, cancelled() turns true (the scheduler then
// ends the request) and the call finishes RESOURCE_EXHAUSTED.
class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit GenerateReactor(size_t max_queued_bytes) : max_queued_bytes_(max_queued_bytes) {}

  // Queues `message` for writing (dropped once the client is gone).
  void Push(v1::GenerateResponse message) ABSL_LOCKS_EXCLUDED(mu_);
  // Finishes the call with `status` after every queued message is written. Call once.
  void Close(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the client cancelled (or the deadline passed, or it read too slowly).
  bool cancelled() const { return cancelled_.load(); }
  // Whether a message is being written.
  bool WritingForTest() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return writing_;
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override { delete this; }

 private:
  Mutex mu_;
  const size_t max_queued_bytes_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Of queue_'s messages.
  bool overrun_ ABSL_GUARDED_BY(mu_) = false;     // More than max_queued_bytes_ waited.
  v1::GenerateResponse current_;                  // The message being written (owned by the write).
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // A write failed: the client is gone.
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
};

struct GenerateSinkOptions {
  const text::Tokenizer* tokenizer = nullptr;  // Null: token ids only, no text.
  std::vector<std::string> stop;               // Stop strings (not included in the output).
  bool parse_output = false;
  text::OutputParserOptions parser;
  int logprobs = 0;
  std::string request_id;
};

// Turns the scheduler's results for one request into Generate stream messages: Started, Deltas
// with whole-UTF-8 text (held back while it may be the start of a stop string), reasoning and
// tool calls when parse_output is on, logprobs, and Finished.
//
// Thread roles: the scheduler thread calls every RequestSink method; `reactor` must stay
// valid until OnFinished (it does: only OnFinished closes it).
class GenerateSink final : public RequestSink {
 public:
  GenerateSink(GenerateReactor* reactor, GenerateSinkOptions options);

  void OnStarted(const StartInfo& info) override;
  bool OnToken(const SampledToken& token) override;
  void OnFinished(const absl::Status& status, const FinishInfo& info) override;
  bool Cancelled() const override { return reactor_->cancelled(); }

 private:
  // Sends text_[emitted_, end) (through the parser when parse_output) with `ids` and
  // `logprobs`.
  void Emit(size_t end, std::vector<uint32_t> ids, std::vector<v1::TokenLogprob> logprobs);
  std::string TokenText(int32_t id) const;
  std::string TokenBytes(int32_t id) const;
  // Generated tokens whose text lies in the reasoning block (see Finished.reasoning_tokens).
  int64_t ReasoningTokens() const;

  GenerateReactor* const reactor_;
  const GenerateSinkOptions options_;
  std::optional<text::StreamingDecoder> decoder_;
  std::optional<text::OutputParser> parser_;
  std::string text_;     // Every visible character generated so far.
  size_t emitted_ = 0;   // Bytes of text_ already sent.
  size_t max_stop_ = 0;  // Longest stop string.
  bool stopped_ = false;
  std::string stop_sequence_;  // The stop string that ended the output.
  // text_.size() after each generated token was decoded, in order.
  std::vector<size_t> token_text_ends_;
  text::ParsedOutput parsed_;  // Accumulated, for Finished.
  int tool_calls_ = 0;
};

// Converts between the engine's and the proto's vocabularies.
v1::CacheResult ToProto(const CacheReport& report);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_DAEMON_GENERATE_STREAM_H_
