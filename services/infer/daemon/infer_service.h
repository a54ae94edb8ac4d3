#ifndef CAIRN_SERVICES_INFER_DAEMON_INFER_SERVICE_H_
#define CAIRN_SERVICES_INFER_DAEMON_INFER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/thread_pool.h"
#include "services/infer/daemon/served_model.h"
#include "services/infer/engine/request.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/token_constraint.h"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/grammar_cache.h"
#include "services/infer/text/output_parser.h"

namespace cairn::infer {

struct InferServiceOptions {
  int max_logprobs = 20;  // Most alternatives per token.
  int max_stop_strings = 16;
  // Longest stop string; the gateway mirrors it (kInferMaxStopBytes in
  // services/gateway/openai/format_util.h) to refuse longer ones naming the client's field.
  size_t max_stop_bytes = 256;
  size_t max_label_bytes = 256;  // request_id and conversation.
  size_t max_messages = 4096;    // Chat messages per request.
  // Compiled grammars kept by schema or tools (text::GrammarCache): entries and key bytes.
  size_t grammar_cache_entries = 64;
  size_t grammar_cache_key_bytes = size_t{32} << 20;
  // Generate messages waiting for a client that reads slower than they come; past it the call
  // ends RESOURCE_EXHAUSTED and its request is cancelled (GenerateReactor).
  size_t max_stream_buffer_bytes = size_t{64} << 20;
  // Chat messages' special tokens are text (text::ChatRequest::special_tokens_as_text).
  bool special_tokens_as_text = true;
  // Calls waiting for a thread of the pool to validate, render and tokenize them; past it a
  // call is refused with RESOURCE_EXHAUSTED (each may hold a request of up to the receive
  // limit, 64 MiB, and the scheduler's --max-queue counts only those already prepared).
  size_t max_queued_calls = 256;
};

// The gRPC adapter of cairn.infer.v1.InferService. Reactions never block: every call is
// validated (and its prompt rendered and tokenized) on `pool`, then handed to the scheduler.
//
// Thread-safe. `model`, `scheduler` and `pool` must outlive the service; `cache_connected`
// reports whether the cache daemon is reachable now.
class InferServiceImpl final : public v1::InferService::CallbackService {
 public:
  InferServiceImpl(const ServedModel* model, Scheduler* scheduler, ThreadPool* pool,
                   std::function<bool()> cache_connected, const InferServiceOptions& options);

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ApplyTemplate(grpc::CallbackServerContext* context,
                                          const v1::ApplyTemplateRequest* request,
                                          v1::ApplyTemplateResponse* response) override;
  grpc::ServerUnaryReactor* ListSlots(grpc::CallbackServerContext* context,
                                      const v1::ListSlotsRequest* request,
                                      v1::ListSlotsResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;

  // Validates `request` and turns it into the scheduler's form (everything but the sink).
  // InvalidArgument naming the field for a bad request; FailedPrecondition naming what the
  // model folder lacks for text or chat prompts without a tokenizer or template. Sets the
  // fields of `parser` the prompt decides: whether the answer starts inside reasoning, and the
  // prompt's tail the answer continues (a forced tool call's opening), and, for a response
  // format, that the text is content only. An empty request_id is replaced by a generated
  // one, "gen-" and 8 hex digits chosen at random when the service starts, "-" and a decimal
  // counter ("gen-1f3a9c07-42"): unique within the daemon's run and unlikely to repeat across
  // runs; never empty.
  absl::StatusOr<GenerateRequest> Prepare(const v1::GenerateRequest& request,
                                          text::OutputParserOptions* parser) const;

 private:
  // Queues `fn` on the pool: OK, or RESOURCE_EXHAUSTED where max_queued_calls already wait,
  // UNAVAILABLE when the pool is stopping (the daemon drains).
  grpc::Status Enqueue(absl::AnyInvocable<void() &&> fn);
  // Renders a chat prompt: its text, token ids, stable and shared boundaries, and the opening
  // of a tool call that tool_choice "required" or a function's name forces. With
  // `without_reasoning` (a response format) the turn is rendered without reasoning. With
  // `max_tokens` > 0, a prompt past that many tokens is OutOfRange, found after about that many
  // tokens' work.
  absl::StatusOr<text::RenderedPrompt> RenderChat(const v1::ChatPrompt& chat,
                                                  bool without_reasoning = false,
                                                  size_t max_tokens = 0) const;
  // The constraint of `request`'s response_format (null without one), ending the answer with
  // `stop_ids`' end-of-turn tokens. InvalidArgument naming the field for a bad format or one
  // the request's other fields rule out.
  absl::StatusOr<std::unique_ptr<TokenConstraint>> MakeConstraint(
      const v1::GenerateRequest& request, const std::vector<int32_t>& stop_ids) const;
  absl::Status NeedTokenizer() const;
  // A request id for a request that gave none (see Prepare).
  std::string NewRequestId() const;

  const ServedModel* const model_;
  Scheduler* const scheduler_;
  ThreadPool* const pool_;
  const std::function<bool()> cache_connected_;
  const InferServiceOptions options_;
  // Structured outputs' and tool calls' grammars, by the schema or tools they came from.
  mutable text::GrammarCache grammars_;
  // Generated request ids: this run's prefix and the next number.
  const std::string id_prefix_;
  mutable std::atomic<uint64_t> next_id_{1};
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_DAEMON_INFER_SERVICE_H_
