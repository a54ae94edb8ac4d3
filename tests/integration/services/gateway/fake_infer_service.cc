#include "tests/integration/services/gateway/fake_infer_service.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cairn::gateway::testing {

namespace {
// Bounds every wait inside the fake, so that a broken gateway fails a test, never hangs it.
constexpr absl::Duration kMaxWaitForCancel = absl::Seconds(20);
constexpr absl::Duration kCancelPoll = absl::Milliseconds(2);
}  // namespace

Script& Script::Started(uint32_t prompt_tokens, uint64_t cached) {
  Step s;
  s.message.mutable_started()->set_request_id("req-1");
  s.message.mutable_started()->set_prompt_tokens(prompt_tokens);
  auto* cache = s.message.mutable_started()->mutable_cache();
  cache->set_restored_depth(cached);
  cache->set_restored_from(cached > 0 ? infer_v1::CacheResult::TIER_RAM
                                      : infer_v1::CacheResult::TIER_UNSPECIFIED);
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::Text(const std::string& text) {
  Step s;
  s.message.mutable_delta()->set_text(text);
  s.message.mutable_delta()->add_token_ids(static_cast<uint32_t>(text.size()));
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::Reasoning(const std::string& text) {
  Step s;
  s.message.mutable_delta()->set_reasoning_text(text);
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::ToolCall(uint32_t index, const std::string& id, const std::string& name,
                         const std::string& arguments_delta) {
  Step s;
  auto* tc = s.message.mutable_delta()->add_tool_calls();
  tc->set_index(index);
  tc->set_id(id);
  tc->set_name(name);
  tc->set_arguments_delta(arguments_delta);
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::Finished(infer_v1::Finished finished) {
  Step s;
  *s.message.mutable_finished() = std::move(finished);
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::Pause(absl::Duration d) {
  Step s;
  s.kind = Step::kPause;
  s.pause = d;
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::WaitForCancel() {
  Step s;
  s.kind = Step::kWaitForCancel;
  steps.push_back(std::move(s));
  return *this;
}

Script& Script::Fail(grpc::StatusCode code, const std::string& message) {
  status = grpc::Status(code, message);
  return *this;
}

infer_v1::Finished Script::MakeFinished(infer_v1::Finished::Reason reason, uint32_t completion) {
  infer_v1::Finished f;
  f.set_reason(reason);
  f.set_prompt_tokens(12);
  f.set_completion_tokens(completion);
  f.set_cached_tokens(8);
  auto* cache = f.mutable_cache();
  cache->set_restored_from(infer_v1::CacheResult::TIER_RAM);
  cache->set_restored_depth(8);
  cache->set_prefilled_tokens(4);
  cache->set_restore_ms(1.5);
  cache->set_ttft_ms(7.25);
  cache->set_cache_available(true);
  return f;
}

Script Script::Reply(const std::vector<std::string>& texts) {
  Script s;
  s.Started(12, 8);
  std::string all;
  for (const std::string& t : texts) {
    s.Text(t);
    all += t;
  }
  infer_v1::Finished f =
      MakeFinished(infer_v1::Finished::REASON_STOP, static_cast<uint32_t>(texts.size()));
  f.set_content(all);
  s.Finished(std::move(f));
  return s;
}

Script Script::ReadFileToolCall(const infer_v1::GenerateRequest&) {
  Script s;
  s.Started(20)
      .Reasoning("I should look")
      .ToolCall(0, "call_1", "read_file", "")
      .ToolCall(0, "", "", "{\"path\":")
      .ToolCall(0, "", "", "\"a.txt\"}");
  infer_v1::Finished f = MakeFinished(infer_v1::Finished::REASON_TOOL_CALLS, 6);
  f.set_reasoning_content("I should look");
  auto* tc = f.add_tool_calls();
  tc->set_id("call_1");
  tc->set_name("read_file");
  tc->set_arguments_json("{\"path\":\"a.txt\"}");
  s.Finished(f);
  return s;
}

FakeInferService::FakeInferService() {
  choose_ = [](const infer_v1::GenerateRequest&) { return Script::Reply({"Hello", " world"}); };
  model_.set_name("fake-model");
  model_.set_architecture("fake");
  model_.set_context_length(4096);
  model_.set_vocab_size(1000);
  model_.set_slots(2);
  model_.set_backend("cpu");
  for (uint32_t i = 0; i < 2; ++i) {
    auto* slot = slots_.add_slots();
    slot->set_slot(i);
    slot->set_state(infer_v1::SlotInfo::STATE_IDLE);
  }
}

void FakeInferService::SetSlots(infer_v1::ListSlotsResponse slots) {
  MutexLock lock(&mu_);
  slots_ = std::move(slots);
}

void FakeInferService::SetScript(std::function<Script(const infer_v1::GenerateRequest&)> choose) {
  MutexLock lock(&mu_);
  choose_ = std::move(choose);
}

void FakeInferService::SetModel(infer_v1::GetModelInfoResponse model) {
  MutexLock lock(&mu_);
  model_ = std::move(model);
}

infer_v1::GenerateRequest FakeInferService::last_request() const {
  MutexLock lock(&mu_);
  return last_request_;
}

int FakeInferService::generate_calls() const {
  MutexLock lock(&mu_);
  return generate_calls_;
}

int FakeInferService::cancelled_calls() const {
  MutexLock lock(&mu_);
  return cancelled_calls_;
}

grpc::Status FakeInferService::Generate(grpc::ServerContext* context,
                                        const infer_v1::GenerateRequest* request,
                                        grpc::ServerWriter<infer_v1::GenerateResponse>* writer) {
  std::function<Script(const infer_v1::GenerateRequest&)> choose;
  {
    MutexLock lock(&mu_);
    last_request_ = *request;
    ++generate_calls_;
    choose = choose_;
  }
  Script script = choose(*request);
  auto note_cancel = [&] {
    MutexLock lock(&mu_);
    ++cancelled_calls_;
    cancelled_.Notify();
  };
  for (const Script::Step& step : script.steps) {
    if (context->IsCancelled()) {
      note_cancel();
      return grpc::Status::CANCELLED;
    }
    switch (step.kind) {
      case Script::Step::kSend:
        if (!writer->Write(step.message)) {
          note_cancel();
          return grpc::Status::CANCELLED;
        }
        break;
      case Script::Step::kPause:
        absl::SleepFor(step.pause);
        break;
      case Script::Step::kWaitForCancel: {
        waiting_.Notify();
        absl::Time deadline = absl::Now() + kMaxWaitForCancel;
        while (!context->IsCancelled() && absl::Now() < deadline) absl::SleepFor(kCancelPoll);
        if (context->IsCancelled()) {
          note_cancel();
          return grpc::Status::CANCELLED;
        }
        return grpc::Status(grpc::StatusCode::INTERNAL, "fake: never cancelled");
      }
    }
  }
  return script.status;
}

grpc::Status FakeInferService::Tokenize(grpc::ServerContext*,
                                        const infer_v1::TokenizeRequest* request,
                                        infer_v1::TokenizeResponse* response) {
  for (unsigned char c : request->text()) response->add_ids(c);
  return grpc::Status::OK;
}

grpc::Status FakeInferService::Detokenize(grpc::ServerContext*,
                                          const infer_v1::DetokenizeRequest* request,
                                          infer_v1::DetokenizeResponse* response) {
  std::string text;
  for (uint32_t id : request->ids()) text.push_back(static_cast<char>(id & 0x7f));
  response->set_text(text);
  return grpc::Status::OK;
}

grpc::Status FakeInferService::ApplyTemplate(grpc::ServerContext*,
                                             const infer_v1::ApplyTemplateRequest* request,
                                             infer_v1::ApplyTemplateResponse* response) {
  std::string text;
  for (const auto& m : request->chat().messages()) {
    text += "<|" + m.role() + "|>" + m.content() + "\n";
  }
  response->set_text(text);
  for (unsigned char c : text) response->add_ids(c);
  return grpc::Status::OK;
}

grpc::Status FakeInferService::ListSlots(grpc::ServerContext*, const infer_v1::ListSlotsRequest*,
                                         infer_v1::ListSlotsResponse* response) {
  MutexLock lock(&mu_);
  *response = slots_;
  return grpc::Status::OK;
}

grpc::Status FakeInferService::GetModelInfo(grpc::ServerContext*,
                                            const infer_v1::GetModelInfoRequest*,
                                            infer_v1::GetModelInfoResponse* response) {
  MutexLock lock(&mu_);
  *response = model_;
  return grpc::Status::OK;
}

FakeInferServer::FakeInferServer() {
  ServerRunnerOptions options;
  options.listen = "127.0.0.1:0";
  options.drain_timeout = absl::Seconds(2);
  options.health_services = {"cairn.infer.v1.InferService"};
  auto runner = ServerRunner::Start(options, {&service_});
  EXPECT_TRUE(runner.ok()) << runner.status();
  runner_ = std::move(*runner);
  runner_->SetAllServing(true);
}

FakeInferServer::~FakeInferServer() {
  runner_->Drain();
  runner_->Wait();
}

}  // namespace cairn::gateway::testing
