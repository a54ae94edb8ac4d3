// InferPool against several scripted daemons: requests go to the daemon serving their model,
// generations that fail UNAVAILABLE before any output move to another daemon, unknown model
// names are refused when strict, and a dead daemon never makes the pool hang.

#include <atomic>
#include <memory>
#include <vector>

#include "common/concurrency/notification.h"
#include "gtest/gtest.h"
#include "services/gateway/upstream/infer_pool.h"
#include "tests/integration/services/gateway/fake_infer_service.h"

namespace cairn::gateway::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

// Collects one Generate stream, reading every message.
class Collector : public GenerateObserver {
 public:
  void OnMessage(infer_v1::GenerateResponse message) override {
    std::shared_ptr<GenerateCall> call;
    {
      MutexLock lock(&mu_);
      messages_.push_back(std::move(message));
      call = call_;
      pending_read_ = call == nullptr;  // set_call reads on.
    }
    if (call != nullptr) call->ReadNext();
  }
  void OnDone(absl::Status status) override {
    {
      MutexLock lock(&mu_);
      status_ = std::move(status);
    }
    done_.Notify();
  }
  // Hands over the call; reads on if a message arrived before it.
  void set_call(std::shared_ptr<GenerateCall> call) {
    bool read = false;
    {
      MutexLock lock(&mu_);
      call_ = call;
      read = pending_read_;
      pending_read_ = false;
    }
    if (read) call->ReadNext();
  }
  absl::Status WaitDone() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(kWait));
    MutexLock lock(&mu_);
    call_.reset();  // Breaks the call <-> observer cycle.
    return status_;
  }
  size_t messages() {
    MutexLock lock(&mu_);
    return messages_.size();
  }

 private:
  Mutex mu_;
  std::vector<infer_v1::GenerateResponse> messages_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<GenerateCall> call_ ABSL_GUARDED_BY(mu_);
  bool pending_read_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  Notification done_;
};

// Runs one generation of `model` through `pool` and returns its final status.
absl::Status RunOnce(InferPool* pool, const std::string& model, size_t* messages = nullptr) {
  auto collector = std::make_shared<Collector>();
  collector->set_call(pool->Generate(model, infer_v1::GenerateRequest(), collector));
  absl::Status s = collector->WaitDone();
  if (messages != nullptr) *messages = collector->messages();
  return s;
}

infer_v1::GetModelInfoResponse Model(const std::string& name) {
  infer_v1::GetModelInfoResponse m;
  m.set_name(name);
  m.set_vocab_size(1000);
  m.set_slots(2);
  return m;
}

std::unique_ptr<InferPool> MakePool(std::vector<std::string> addresses, bool any_name = true) {
  InferPoolOptions options;
  options.addresses = std::move(addresses);
  options.refresh_interval = absl::Milliseconds(100);
  options.any_model_name = any_name;
  auto pool = InferPool::Create(options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(*pool);
}

TEST(InferPoolTest, RequestsGoToTheDaemonServingTheirModel) {
  FakeInferServer a, b;
  a.service().SetModel(Model("alpha"));
  b.service().SetModel(Model("beta"));
  auto pool = MakePool({a.address(), b.address()});
  ASSERT_TRUE(pool->WaitForReady(kWait));
  pool->RefreshNow();

  EXPECT_TRUE(RunOnce(pool.get(), "beta").ok());
  EXPECT_TRUE(RunOnce(pool.get(), "beta").ok());
  EXPECT_TRUE(RunOnce(pool.get(), "alpha").ok());

  EXPECT_EQ(a.service().generate_calls(), 1);
  EXPECT_EQ(b.service().generate_calls(), 2);
  EXPECT_EQ(pool->Models().size(), 2u);
  EXPECT_EQ(pool->ResolveModel("gamma").status().code(), absl::StatusCode::kNotFound);
  pool->Shutdown();
}

infer_v1::ListSlotsResponse Slots(std::vector<infer_v1::SlotInfo::State> states,
                                  const std::string& conversation = "", uint32_t queued = 0) {
  infer_v1::ListSlotsResponse r;
  for (size_t i = 0; i < states.size(); ++i) {
    auto* slot = r.add_slots();
    slot->set_slot(static_cast<uint32_t>(i));
    slot->set_state(states[i]);
    if (i == 0) slot->set_conversation(conversation);
  }
  r.set_queued_requests(queued);
  return r;
}

absl::Status RunConversation(InferPool* pool, const std::string& conversation) {
  auto collector = std::make_shared<Collector>();
  infer_v1::GenerateRequest request;
  request.set_conversation(conversation);
  collector->set_call(pool->Generate("fake-model", std::move(request), collector));
  return collector->WaitDone();
}

TEST(InferPoolTest, LeastLoadedDaemonWinsUnlessAnotherHoldsTheConversation) {
  using S = infer_v1::SlotInfo;
  FakeInferServer idle, busy;
  idle.service().SetSlots(Slots({S::STATE_IDLE, S::STATE_IDLE}));
  busy.service().SetSlots(Slots({S::STATE_IDLE, S::STATE_DECODE}, "conv-7"));
  auto pool = MakePool({busy.address(), idle.address()});
  ASSERT_TRUE(pool->WaitForReady(kWait));
  pool->RefreshNow();

  EXPECT_TRUE(RunConversation(pool.get(), "conv-1").ok());
  EXPECT_EQ(idle.service().generate_calls(), 1);
  EXPECT_TRUE(RunConversation(pool.get(), "conv-7").ok());
  EXPECT_EQ(busy.service().generate_calls(), 1);

  // A daemon with every slot busy and a queue loses its affinity to one with room.
  busy.service().SetSlots(Slots({S::STATE_DECODE, S::STATE_DECODE}, "conv-7", 3));
  pool->RefreshNow();
  EXPECT_TRUE(RunConversation(pool.get(), "conv-7").ok());
  EXPECT_EQ(idle.service().generate_calls(), 2);
}

TEST(InferPoolTest, StrictNamesRefuseUnknownModelsElseTheOnlyModelAnswers) {
  FakeInferServer a;
  auto lenient = MakePool({a.address()});
  auto strict = MakePool({a.address()}, /*any_name=*/false);
  ASSERT_TRUE(lenient->WaitForReady(kWait));
  ASSERT_TRUE(strict->WaitForReady(kWait));

  EXPECT_EQ(lenient->ResolveModel("gpt-4o")->name, "fake-model");
  EXPECT_EQ(lenient->ResolveModel("")->name, "fake-model");
  EXPECT_EQ(strict->ResolveModel("gpt-4o").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(strict->ResolveModel("")->name, "fake-model");
}

TEST(InferPoolTest, UnavailableBeforeAnyOutputMovesToAnotherDaemon) {
  FakeInferServer a, b;
  for (FakeInferServer* server : {&a, &b}) {
    server->service().SetScript([](const infer_v1::GenerateRequest&) {
      Script s;
      s.Fail(grpc::StatusCode::UNAVAILABLE, "draining");
      return s;
    });
  }
  b.service().SetScript([](const infer_v1::GenerateRequest&) { return Script::Reply({"ok"}); });
  auto pool = MakePool({a.address(), b.address()});
  ASSERT_TRUE(pool->WaitForReady(kWait));
  pool->RefreshNow();

  for (int i = 0; i < 4; ++i) {
    size_t messages = 0;
    EXPECT_TRUE(RunOnce(pool.get(), "fake-model", &messages).ok()) << i;
    EXPECT_EQ(messages, 3u);
  }

  EXPECT_EQ(b.service().generate_calls(), 4);
}

TEST(InferPoolTest, UnavailableAfterOutputIsNotRetried) {
  FakeInferServer a, b;
  for (FakeInferServer* server : {&a, &b}) {
    server->service().SetScript([](const infer_v1::GenerateRequest&) {
      Script s;
      s.Started(1).Fail(grpc::StatusCode::UNAVAILABLE, "went away");
      return s;
    });
  }
  auto pool = MakePool({a.address(), b.address()});
  ASSERT_TRUE(pool->WaitForReady(kWait));
  pool->RefreshNow();

  absl::Status s = RunOnce(pool.get(), "fake-model");

  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.service().generate_calls() + b.service().generate_calls(), 1);
}

// A Cancel that comes after an attempt failed and before the retry has started (the caller's
// client went away just then) still cancels the retry, which would otherwise run on unseen.
TEST(InferPoolTest, ACancelBetweenAttemptsCancelsTheRetry) {
  FakeInferServer a, b;
  std::atomic<int> calls{0};
  for (FakeInferServer* server : {&a, &b}) {
    server->service().SetScript([&calls](const infer_v1::GenerateRequest&) {
      Script s;
      if (calls++ == 0) {
        s.Fail(grpc::StatusCode::UNAVAILABLE, "draining");
      } else {
        s.Started(1).WaitForCancel();
      }
      return s;
    });
  }
  InferPoolOptions options;
  options.addresses = {a.address(), b.address()};
  options.refresh_interval = absl::Milliseconds(100);
  options.before_retry_for_test = [](GenerateCall* call) { call->Cancel(); };
  auto pool = InferPool::Create(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitForReady(kWait));
  (*pool)->RefreshNow();

  absl::Status s = RunOnce(pool->get(), "fake-model");

  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  (*pool)->Shutdown();
}

TEST(InferPoolTest, NoDaemonReadyAnswersUnavailableWithoutHanging) {
  auto pool = MakePool({"unix:/nonexistent/cairn-infer.sock"});

  EXPECT_FALSE(pool->WaitForReady(absl::Milliseconds(300)));
  EXPECT_EQ(pool->ResolveModel("x").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RunOnce(pool.get(), "x").code(), absl::StatusCode::kUnavailable);
  pool->Shutdown();
}

TEST(InferPoolTest, AMalformedOrRepeatedAddressIsRefusedAtCreate) {
  for (const std::vector<std::string>& addresses :
       std::vector<std::vector<std::string>>{{}, {"garbage"}, {"unix:"}, {"unix:/a", "unix:/a"}}) {
    InferPoolOptions options;
    options.addresses = addresses;

    auto pool = InferPool::Create(options);

    EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument) << pool.status();
  }
}

TEST(InferPoolTest, ShutdownCancelsOpenStreams) {
  FakeInferServer a;
  a.service().SetScript([](const infer_v1::GenerateRequest&) {
    Script s;
    s.Started(1).WaitForCancel();
    return s;
  });
  auto pool = MakePool({a.address()});
  ASSERT_TRUE(pool->WaitForReady(kWait));
  auto collector = std::make_shared<Collector>();
  auto call = pool->Generate("fake-model", infer_v1::GenerateRequest(), collector);
  collector->set_call(call);
  ASSERT_TRUE(a.service().waiting().WaitForNotificationWithTimeout(kWait));

  pool->Shutdown();

  EXPECT_EQ(collector->WaitDone().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(a.service().cancelled().WaitForNotificationWithTimeout(kWait));
}

}  // namespace
}  // namespace cairn::gateway::testing
