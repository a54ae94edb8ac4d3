// What preparing a request (validating, rendering, tokenizing) may cost the inference daemon:
// a prompt no context can hold is refused after about a context's worth of tokenizer work,
// and calls waiting for a preparing thread are bounded.

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc/client.h"
#include "gtest/gtest.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/integration/services/infer/infer_text_fixture.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::testing {
namespace {

// `bytes` of English-like text.
std::string Words(size_t bytes) {
  std::string text;
  text.reserve(bytes + 16);
  while (text.size() < bytes) text += "the quick brown fox jumps over a lazy dog. ";
  return text;
}

void ExpectContextOverflow(const grpc::Status& status) {
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "does not fit the context"))
      << status.error_message();
  v1::ErrorDetails details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.reason(), v1::ERROR_REASON_CONTEXT_OVERFLOW);
}

// Megabytes of text, as text or as a chat message, to a context of 2048 tokens: the same
// refusal as any prompt too long, found once the encoding passes the context.
TEST_F(InferDaemonTextTest, AHugeTextOrChatPromptIsAContextOverflow) {
  const std::string text = Words(size_t{6} << 20);
  v1::GenerateRequest as_text;
  as_text.set_text(text);
  as_text.mutable_sampling()->set_max_tokens(1);
  ExpectContextOverflow(Generate(*stub_, as_text, absl::Seconds(60)).status);

  v1::GenerateRequest as_chat;
  v1::ChatMessage* m = as_chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content(text);
  as_chat.mutable_sampling()->set_max_tokens(1);
  ExpectContextOverflow(Generate(*stub_, as_chat, absl::Seconds(60)).status);

  // One that fits still runs.
  v1::GenerateRequest small = as_text;
  small.set_text(Words(2000));
  GenerateResult ok = Generate(*stub_, small);
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

// Past --max-queued-calls waiting for the daemon's preparing threads, a call is refused with
// RESOURCE_EXHAUSTED at once (each may hold tens of megabytes, and tokenizing them takes
// seconds); those admitted are answered.
TEST(InferPrepareQueueTest, CallsPastTheQueueBoundAreRefusedAtOnce) {
  CAIRN_REQUIRE_DOWNLOADED(text::testing::Qwen3ModelDir() + "/tokenizer.json");
  absl::StatusOr<std::string> dir = MakeModelFolder("dense", true, "m-prepare-queue");
  ASSERT_TRUE(dir.ok()) << dir.status();
  InferServerOptions o;
  o.model_dir = *dir;
  o.service.max_queued_calls = 1;
  absl::StatusOr<std::unique_ptr<InferServer>> server = InferServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();

  // Tokenize has no context to stop it: each call encodes its whole text.
  const std::string text = Words(size_t{2} << 20);
  constexpr int kCalls = 24;
  absl::Mutex mu;
  std::vector<grpc::Status> statuses;
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&] {
      std::unique_ptr<v1::InferService::Stub> stub = (*server)->NewStub();
      auto ctx = NewClientContext(absl::Seconds(120));
      v1::TokenizeRequest req;
      req.set_text(text);
      v1::TokenizeResponse resp;
      grpc::Status s = stub->Tokenize(ctx.get(), req, &resp);
      EXPECT_TRUE(!s.ok() || resp.ids_size() > 0);
      absl::MutexLock lock(&mu);
      statuses.push_back(s);
    });
  }
  for (std::thread& t : callers) t.join();

  int ok = 0, refused = 0;
  for (const grpc::Status& s : statuses) {
    if (s.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
      EXPECT_TRUE(absl::StrContains(s.error_message(), "retry later")) << s.error_message();
      ++refused;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
}

}  // namespace
}  // namespace cairn::infer::testing
