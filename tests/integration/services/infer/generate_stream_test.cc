// The Generate stream's two halves over a real gRPC call. GenerateReactor against a client that
// does not read: once more than its limit of messages waits to be written, it drops them,
// reports the client as cancelled (so the scheduler ends the request) and finishes the call
// RESOURCE_EXHAUSTED instead of holding memory without end. GenerateSink's Deltas keep a tool
// call and the text after it in their order.
#include "services/infer/daemon/generate_stream.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/notification.h"
#include "common/grpc/client.h"
#include "common/grpc/server_runner.h"
#include "common/status/status_macros.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/unit/services/infer/models/model_test_util.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer {
namespace {

using ::testing::HasSubstr;

constexpr size_t kLimit = 64 << 10;
constexpr absl::Duration kWait = absl::Seconds(30);

// `service` served on a Unix socket `name` in the scratch folder, and a client of it.
struct Served {
  std::unique_ptr<ServerRunner> server;
  std::unique_ptr<v1::InferService::Stub> stub;
};
absl::StatusOr<Served> Serve(grpc::Service* service, const std::string& name) {
  ServerRunnerOptions ro;
  ro.listen = absl::StrCat("unix:", testing::ScratchDir(), "/", name);
  ro.drain_timeout = absl::Seconds(1);
  Served served;
  ASSIGN_OR_RETURN(served.server, ServerRunner::Start(ro, {service}));
  served.stub = v1::InferService::NewStub(
      grpc::CreateChannel(served.server->address(), grpc::InsecureChannelCredentials()));
  return served;
}

v1::GenerateResponse DeltaOf(size_t bytes) {
  v1::GenerateResponse r;
  r.mutable_delta()->set_text(std::string(bytes, 'x'));
  return r;
}

// Generate answers with a reactor limited to kLimit queued bytes. The first message is larger
// than HTTP/2's flow-control window, so its write cannot finish before the client reads; the
// next ones wait in the queue. What the reactor reported is recorded before it closes.
class SlowClientService final : public v1::InferService::CallbackService {
 public:
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const v1::GenerateRequest*) override {
    auto* reactor = new GenerateReactor(kLimit);
    reactor->Push(DeltaOf(1 << 20));
    reactor->Push(DeltaOf(kLimit / 2));
    cancelled_before_limit_ = reactor->cancelled();
    reactor->Push(DeltaOf(kLimit / 2 + 1));
    cancelled_after_limit_ = reactor->cancelled();
    reactor->Close(grpc::Status::OK);
    pushed_.Notify();
    return reactor;
  }

  bool cancelled_before_limit_ = true;
  bool cancelled_after_limit_ = false;
  Notification pushed_;
};

TEST(GenerateStreamTest, AClientThatDoesNotReadEndsResourceExhausted) {
  SlowClientService service;
  absl::StatusOr<Served> served = Serve(&service, "generate-stream.sock");
  ASSERT_TRUE(served.ok()) << served.status();
  v1::InferService::Stub* const stub = served->stub.get();

  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(kWait);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(ctx.get(), v1::GenerateRequest());
  ASSERT_TRUE(service.pushed_.WaitForNotificationWithTimeout(kWait));
  int messages = 0;
  v1::GenerateResponse m;
  while (reader->Read(&m)) ++messages;
  const grpc::Status st = reader->Finish();

  EXPECT_FALSE(service.cancelled_before_limit_);
  EXPECT_TRUE(service.cancelled_after_limit_);
  EXPECT_EQ(messages, 1);  // The one being written; the queued ones were dropped.
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("too slowly"));
}

// As SlowClientService, but the call is closed (as the scheduler closes it once it sees the
// reactor cancelled) only after the client read the message that was being written, when no
// write is in flight any more.
class ClosedAfterTheWriteService final : public v1::InferService::CallbackService {
 public:
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const v1::GenerateRequest*) override {
    reactor_ = new GenerateReactor(kLimit);
    reactor_->Push(DeltaOf(1 << 20));
    reactor_->Push(DeltaOf(kLimit / 2));
    reactor_->Push(DeltaOf(kLimit / 2 + 1));
    pushed_.Notify();
    return reactor_;
  }
  // Waits (up to kWait) until the reactor has no write in flight, then closes the call.
  void CloseOnceIdle() {
    const absl::Time deadline = absl::Now() + kWait;
    while (reactor_->WritingForTest() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));  // Polling a condition, bounded by kWait.
    }
    reactor_->Close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  GenerateReactor* reactor_ = nullptr;
  Notification pushed_;
};

TEST(GenerateStreamTest, AnOverrunCallClosedAfterItsLastWriteStillEndsResourceExhausted) {
  ClosedAfterTheWriteService service;
  absl::StatusOr<Served> served = Serve(&service, "generate-overrun.sock");
  ASSERT_TRUE(served.ok()) << served.status();
  v1::InferService::Stub* const stub = served->stub.get();
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(kWait);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(ctx.get(), v1::GenerateRequest());
  ASSERT_TRUE(service.pushed_.WaitForNotificationWithTimeout(kWait));
  v1::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));

  service.CloseOnceIdle();
  while (reader->Read(&m)) {
  }
  const grpc::Status st = reader->Finish();

  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("too slowly"));
}

// Generate answers by feeding the token ids of `text_` through a GenerateSink that parses tool
// calls and holds back text behind a long stop string, then finishes.
class ScriptedAnswerService final : public v1::InferService::CallbackService {
 public:
  ScriptedAnswerService(const text::Tokenizer* tokenizer, std::vector<int32_t> ids)
      : tokenizer_(tokenizer), ids_(std::move(ids)) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const v1::GenerateRequest*) override {
    auto* reactor = new GenerateReactor(kLimit);
    GenerateSinkOptions o;
    o.tokenizer = tokenizer_;
    o.stop = {std::string(40, '#')};
    o.parse_output = true;
    GenerateSink sink(reactor, o);
    for (int32_t id : ids_) sink.OnToken({.id = id, .logprob = 0.0f, .top = {}});
    sink.OnFinished(absl::OkStatus(), FinishInfo{});
    return reactor;
  }

 private:
  const text::Tokenizer* const tokenizer_;
  const std::vector<int32_t> ids_;
};

// Text that follows a tool call comes in a Delta after the call's, never beside it (where a
// client reads a Delta's text as coming before its calls): here the call's closing tag and the
// text after it are held back together behind the stop string and emitted as one piece.
TEST(GenerateStreamTest, TextAfterAToolCallComesInALaterDelta) {
  CAIRN_REQUIRE_DOWNLOADED(text::testing::Qwen3ModelDir() + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer =
      text::Tokenizer::FromFile(text::testing::Qwen3ModelDir() + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<text::TokenId>> ids =
      (*tokenizer)
          ->Encode(
              "Let me look.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>\n"
              "and then some words after the call");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ScriptedAnswerService service(tokenizer->get(), {ids->begin(), ids->end()});
  absl::StatusOr<Served> served = Serve(&service, "generate-order.sock");
  ASSERT_TRUE(served.ok()) << served.status();
  v1::InferService::Stub* const stub = served->stub.get();

  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(kWait);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(ctx.get(), v1::GenerateRequest());
  int at = 0, call_at = -1, after_at = -1;
  std::string text;
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    if (!m.has_delta()) continue;
    ++at;
    if (m.delta().tool_calls_size() > 0) call_at = at;
    if (absl::StrContains(m.delta().text(), "after the call") && after_at < 0) after_at = at;
    text += m.delta().text();
  }
  const grpc::Status st = reader->Finish();

  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_GT(call_at, 0);
  EXPECT_GT(after_at, call_at) << text;
  EXPECT_THAT(text, HasSubstr("Let me look."));
}

}  // namespace
}  // namespace cairn::infer
