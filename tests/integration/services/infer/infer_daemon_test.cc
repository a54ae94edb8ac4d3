// cairn-infer over gRPC without a cache daemon: generation equals the uncached reference bit for
// bit, live continuation, batch invariance under concurrency, cancellation, bad requests.
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/daemon/served_model.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/integration/services/infer/infer_text_fixture.h"
#include "tests/unit/services/infer/models/model_test_util.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kVocab = 1024;  // The random presets' vocabulary.

// The reason cairn-infer names in a failed call's binary error details (ErrorDetails), checking
// that the details repeat the call's code and message as google.rpc.Status's fields would;
// ERROR_REASON_UNSPECIFIED where the call carries no details.
v1::ErrorReason ReasonOf(const grpc::Status& status) {
  if (status.error_details().empty()) return v1::ERROR_REASON_UNSPECIFIED;
  v1::ErrorDetails details;
  EXPECT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.code(), static_cast<int32_t>(status.error_code()));
  EXPECT_EQ(details.message(), status.error_message());
  return details.reason();
}

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<uint32_t>& b, size_t n) {
  for (size_t i = 0; i < n; ++i) a.push_back(static_cast<int32_t>(b[i]));
  return a;
}

class InferDaemonTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeModelFolder(GetParam(), false, "m-" + GetParam());
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  std::unique_ptr<InferServer> Serve(int slots, int64_t max_pass = 2048) {
    InferServerOptions o;
    o.model_dir = dir_;
    o.slots = slots;
    o.max_pass_tokens = max_pass;
    absl::StatusOr<std::unique_ptr<InferServer>> s = InferServer::Start(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string dir_;
};

TEST_P(InferDaemonTest, GreedyGenerationEqualsTheUncachedReference) {
  auto server = Serve(1, /*max_pass=*/128);
  auto stub = server->NewStub();
  const std::vector<int32_t> prompt = RandomTokens(300, kVocab, 11);

  GenerateResult r = Generate(*stub, TokenRequest(prompt, 12));

  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  auto ref = RunReference(dir_,
                          {{prompt.begin(), prompt.begin() + 128},
                           {prompt.begin() + 128, prompt.begin() + 256},
                           {prompt.begin() + 256, prompt.end()}},
                          12);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r.tokens, ref->tokens);
  EXPECT_TRUE(SameFloats(r.logprobs, ref->logprobs));
  EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_LENGTH);
  EXPECT_EQ(r.finished.prompt_tokens(), 300u);
  EXPECT_EQ(r.finished.completion_tokens(), 12u);
  EXPECT_EQ(r.started.cache().restored_from(), v1::CacheResult::TIER_UNSPECIFIED);
  EXPECT_FALSE(r.finished.cache().cache_available());
}

TEST_P(InferDaemonTest, NextTurnContinuesTheLiveSlotInPlace) {
  auto server = Serve(1);
  auto stub = server->NewStub();
  const std::vector<int32_t> turn1 = RandomTokens(200, kVocab, 21);
  GenerateResult r1 = Generate(*stub, TokenRequest(turn1, 8));
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  // The next prompt repeats turn 1, its answer (all but the last token are in the slot) and a
  // new user message.
  std::vector<int32_t> turn2 = Concat(turn1, r1.tokens, r1.tokens.size());
  const std::vector<int32_t> extra = RandomTokens(40, kVocab, 22);
  turn2.insert(turn2.end(), extra.begin(), extra.end());

  GenerateResult r2 = Generate(*stub, TokenRequest(turn2, 8));

  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_LIVE);
  EXPECT_EQ(r2.started.cache().restored_depth(), 200u + 7u);
  EXPECT_EQ(r2.started.cache().prefilled_tokens(), turn2.size() - 207u);
  EXPECT_EQ(r2.finished.cached_tokens(), 207u);
  // Same pass boundaries uncached: the prompt, seven decode steps, then the rest.
  std::vector<std::vector<int32_t>> passes = {turn1};
  for (int i = 0; i < 7; ++i) passes.push_back({static_cast<int32_t>(r1.tokens[i])});
  passes.push_back({turn2.begin() + 207, turn2.end()});
  auto ref = RunReference(dir_, passes, 8);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r2.tokens, ref->tokens);
  EXPECT_TRUE(SameFloats(r2.logprobs, ref->logprobs));
}

TEST_P(InferDaemonTest, ConcurrentRequestsEqualEachRunAlone) {
  constexpr int kRequests = 4;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) prompts.push_back(RandomTokens(60 + 13 * i, kVocab, 30 + i));
  std::vector<GenerateResult> alone(kRequests), together(kRequests);
  {
    auto server = Serve(1);
    auto stub = server->NewStub();
    for (int i = 0; i < kRequests; ++i) alone[i] = Generate(*stub, TokenRequest(prompts[i], 16));
  }
  {
    auto server = Serve(kRequests);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRequests; ++i) {
      threads.emplace_back([&, i] {
        auto stub = server->NewStub();
        together[i] = Generate(*stub, TokenRequest(prompts[i], 16));
      });
    }
    for (std::thread& t : threads) t.join();
  }

  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(alone[i].status.ok()) << alone[i].status.error_message();
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_EQ(alone[i].tokens, together[i].tokens) << "request " << i;
    EXPECT_TRUE(SameFloats(alone[i].logprobs, together[i].logprobs)) << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, InferDaemonTest,
                         ::testing::Values("dense", "next", "moe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

class InferDaemonErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeModelFolder("dense", false, "m-errors");
    ASSERT_TRUE(dir.ok()) << dir.status();
    InferServerOptions o;
    o.model_dir = *dir;
    o.context_tokens = 512;
    absl::StatusOr<std::unique_ptr<InferServer>> s = InferServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = server_->NewStub();
  }
  void ExpectError(const v1::GenerateRequest& req, grpc::StatusCode code, const std::string& field,
                   v1::ErrorReason reason = v1::ERROR_REASON_UNSPECIFIED) {
    GenerateResult r = Generate(*stub_, req);
    EXPECT_EQ(r.status.error_code(), code) << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(field));
    EXPECT_EQ(ReasonOf(r.status), reason) << r.status.error_message();
  }
  std::unique_ptr<InferServer> server_;
  std::unique_ptr<v1::InferService::Stub> stub_;
};

TEST_F(InferDaemonErrorsTest, BadRequestsNameTheFieldAndTheDaemonStaysHealthy) {
  const auto invalid = grpc::StatusCode::INVALID_ARGUMENT;
  const std::vector<int32_t> ok_prompt = RandomTokens(10, kVocab, 1);
  v1::GenerateRequest r;

  ExpectError(v1::GenerateRequest(), invalid, "prompt");
  r = TokenRequest({}, 4);
  ExpectError(r, invalid, "prompt is empty");
  r = TokenRequest({1, 2, static_cast<int32_t>(kVocab)}, 4);
  ExpectError(r, invalid, "token_ids.ids[2]");
  // A prompt the context cannot hold, alone or with its max_tokens, names its reason.
  r = TokenRequest(RandomTokens(512, kVocab, 2), 4);
  ExpectError(r, invalid, "context", v1::ERROR_REASON_CONTEXT_OVERFLOW);
  r = TokenRequest(ok_prompt, 0);
  ExpectError(r, invalid, "max_tokens");
  r = TokenRequest(ok_prompt, 600);
  ExpectError(r, invalid, "max_tokens", v1::ERROR_REASON_CONTEXT_OVERFLOW);
  r = TokenRequest(ok_prompt, 4);
  r.mutable_sampling()->add_stop_token_ids(5000);
  ExpectError(r, invalid, "stop_token_ids[0]");
  r = TokenRequest(ok_prompt, 4);
  r.mutable_sampling()->set_temperature(-1.0f);
  ExpectError(r, invalid, "temperature");
  r = TokenRequest(ok_prompt, 4);
  r.mutable_sampling()->set_top_p(std::nanf(""));
  ExpectError(r, invalid, "top_p");
  r = TokenRequest(ok_prompt, 4);
  r.mutable_sampling()->set_presence_penalty(std::nanf(""));
  ExpectError(r, invalid, "presence_penalty");
  r = TokenRequest(ok_prompt, 4);
  r.mutable_sampling()->set_logprobs(1000);
  ExpectError(r, invalid, "logprobs");
  // The random folder has no tokenizer or template.
  r = TokenRequest(ok_prompt, 4);
  r.clear_token_ids();
  r.set_text("hello");
  ExpectError(r, grpc::StatusCode::FAILED_PRECONDITION, "tokenizer.json");
  r.clear_text();
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  ExpectError(r, grpc::StatusCode::FAILED_PRECONDITION, "tokenizer.json");

  GenerateResult good = Generate(*stub_, TokenRequest(ok_prompt, 4));
  EXPECT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(good.tokens.size(), 4u);
}

// A request that leaves its sampling knobs to the model (model_defaults, as the gateway sends
// them) takes generation_config.json's: greedy here (do_sample false, which transformers obeys
// whatever the temperature), where the same request on a folder without one samples at
// temperature 1; a knob the request gives is its own.
TEST(InferDaemonSamplingTest, KnobsLeftToTheModelComeFromGenerationConfig) {
  absl::StatusOr<std::string> greedy_dir = MakeModelFolder("dense", false, "m-gen-greedy");
  ASSERT_TRUE(greedy_dir.ok()) << greedy_dir.status();
  {
    std::ofstream f(*greedy_dir + "/generation_config.json");
    f << R"({"do_sample": false, "temperature": 0.7, "top_k": 20, "top_p": 0.95})";
  }
  absl::StatusOr<std::string> plain_dir = MakeModelFolder("dense", false, "m-gen-plain");
  ASSERT_TRUE(plain_dir.ok()) << plain_dir.status();
  InferServerOptions o;
  o.model_dir = *greedy_dir;
  absl::StatusOr<std::unique_ptr<InferServer>> greedy = InferServer::Start(o);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  o.model_dir = *plain_dir;
  absl::StatusOr<std::unique_ptr<InferServer>> plain = InferServer::Start(o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<int32_t> prompt = RandomTokens(12, kVocab, 7);
  v1::GenerateRequest left = TokenRequest(prompt, 12);  // No temperature: greedy before presence.
  left.mutable_sampling()->set_model_defaults(true);
  left.mutable_sampling()->set_seed(5);
  v1::GenerateRequest hot = left;
  hot.mutable_sampling()->set_temperature(1.0f);

  const GenerateResult reference = Generate(*(*greedy)->NewStub(), TokenRequest(prompt, 12));
  const GenerateResult from_config = Generate(*(*greedy)->NewStub(), left);
  const GenerateResult own = Generate(*(*greedy)->NewStub(), hot);
  const GenerateResult api_default = Generate(*(*plain)->NewStub(), left);
  const GenerateResult sampled = Generate(*(*plain)->NewStub(), hot);

  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  ASSERT_TRUE(from_config.status.ok()) << from_config.status.error_message();
  ASSERT_TRUE(own.status.ok()) << own.status.error_message();
  ASSERT_TRUE(api_default.status.ok()) << api_default.status.error_message();
  ASSERT_TRUE(sampled.status.ok()) << sampled.status.error_message();
  EXPECT_EQ(from_config.tokens, reference.tokens) << "the folder's do_sample false";
  EXPECT_NE(own.tokens, reference.tokens);
  EXPECT_EQ(api_default.tokens, sampled.tokens) << "temperature 1, the APIs' default";
  EXPECT_NE(api_default.tokens, reference.tokens);
  // The request's own temperature 1 with the folder's top_k 20 and top_p 0.95 applied, against
  // the same without model_defaults (temperature 1 and nothing else): the same seed and
  // weights, other tokens.
  v1::GenerateRequest hot_alone = hot;
  hot_alone.mutable_sampling()->set_model_defaults(false);
  const GenerateResult unrestricted = Generate(*(*greedy)->NewStub(), hot_alone);
  ASSERT_TRUE(unrestricted.status.ok()) << unrestricted.status.error_message();
  EXPECT_NE(own.tokens, unrestricted.tokens) << "the folder's top_k and top_p";
  // Without model_defaults an absent knob is its zero value whatever the folder says: a folder
  // whose generation_config.json samples at temperature 1 still answers greedily.
  {
    std::ofstream f(*plain_dir + "/generation_config.json");
    f << R"({"temperature": 1.0, "top_k": 20})";
  }
  o.model_dir = *plain_dir;
  absl::StatusOr<std::unique_ptr<InferServer>> hot_folder = InferServer::Start(o);
  ASSERT_TRUE(hot_folder.ok()) << hot_folder.status();
  v1::GenerateRequest explicit_greedy = TokenRequest(prompt, 12);
  explicit_greedy.mutable_sampling()->set_temperature(0.0f);
  const GenerateResult absent = Generate(*(*hot_folder)->NewStub(), TokenRequest(prompt, 12));
  const GenerateResult zero = Generate(*(*hot_folder)->NewStub(), explicit_greedy);
  ASSERT_TRUE(absent.status.ok() && zero.status.ok());
  EXPECT_EQ(absent.tokens, zero.tokens);
}

TEST_F(InferDaemonErrorsTest, ACeilingMaxTokensStopsAtTheContextsEnd) {
  // 506 prompt tokens leave 6 of the context's 512: a server's cap of 600 (a ceiling) gives
  // those 6, where the same number as the client's own limit is refused.
  v1::GenerateRequest r = TokenRequest(RandomTokens(506, kVocab, 3), 600);
  ExpectError(r, grpc::StatusCode::INVALID_ARGUMENT, "max_tokens 600 is more than the 6",
              v1::ERROR_REASON_CONTEXT_OVERFLOW);
  r.mutable_sampling()->set_max_tokens_is_ceiling(true);

  GenerateResult capped = Generate(*stub_, r);

  ASSERT_TRUE(capped.status.ok()) << capped.status.error_message();
  EXPECT_EQ(capped.tokens.size(), 6u);
}

TEST_F(InferDaemonErrorsTest, CancellingTheCallStopsGenerationAndFreesTheSlot) {
  auto ctx = NewClientContext(absl::Seconds(60));
  auto reader = stub_->Generate(ctx.get(), TokenRequest(RandomTokens(10, kVocab, 3), 400));
  v1::GenerateResponse m;
  int deltas = 0;
  while (reader->Read(&m)) {
    if (m.has_delta() && ++deltas == 3) ctx->TryCancel();
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);

  // The slot is free again: the next request runs.
  GenerateResult next = Generate(*stub_, TokenRequest(RandomTokens(10, kVocab, 4), 3));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_LT(deltas, 400);
}

// SIGTERM lets running requests finish for --drain-timeout, then cancels them: such an answer is
// cut short and must not end like a whole one (Finished and OK).
// config.json is part of the compatibility identity: an edit that changes what the same
// weights compute (a norm's epsilon here; a RoPE base or the experts a token takes alike)
// without changing the state's layout must not find the old model's checkpoints. The same
// folder loaded twice keeps its identity.
TEST(InferDaemonIdentityTest, AnEditedConfigIsAnotherIdentity) {
  absl::StatusOr<std::string> dir = MakeModelFolder("dense", false, "m-identity");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ServedModelOptions options;
  options.dir = *dir;
  options.threads = 1;
  absl::StatusOr<std::unique_ptr<ServedModel>> first = ServedModel::Load(options);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<ServedModel>> again = ServedModel::Load(options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->identity().digest, (*first)->identity().digest);

  const std::string config_path = *dir + "/config.json";
  nlohmann::json config;
  {
    std::ifstream in(config_path);
    config = nlohmann::json::parse(in);
  }
  nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
  ASSERT_TRUE(text.contains("rms_norm_eps")) << config.dump();
  text["rms_norm_eps"] = text["rms_norm_eps"].get<double>() * 10;
  {
    std::ofstream out(config_path, std::ios::trunc);
    out << config.dump(2);
  }
  absl::StatusOr<std::unique_ptr<ServedModel>> edited = ServedModel::Load(options);
  ASSERT_TRUE(edited.ok()) << edited.status();
  const CompatibilityIdentity& a = (*first)->identity();
  const CompatibilityIdentity& b = (*edited)->identity();
  EXPECT_EQ(b.weights_digest, a.weights_digest);
  EXPECT_EQ(b.layout_digest, a.layout_digest);
  EXPECT_NE(b.config_digest, a.config_digest);
  EXPECT_NE(b.digest, a.digest);
}

TEST(InferDaemonDrainTest, ARequestCancelledByTheDrainEndsUnavailable) {
  absl::StatusOr<std::string> dir = MakeModelFolder("dense", false, "m-drain");
  ASSERT_TRUE(dir.ok()) << dir.status();
  InferServerOptions o;
  o.model_dir = *dir;
  o.context_tokens = 4096;
  absl::StatusOr<std::unique_ptr<InferServer>> server = InferServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = (*server)->NewStub();
  auto ctx = NewClientContext(absl::Seconds(60));
  auto reader = stub->Generate(ctx.get(), TokenRequest(RandomTokens(10, kVocab, 3), 4000));
  v1::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  ASSERT_TRUE(m.has_started());

  (*server)->DrainSchedulerForTest(absl::Now());

  bool finished = false;
  while (reader->Read(&m)) finished = finished || m.has_finished();
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("shutting down"));
  EXPECT_FALSE(finished);
}

TEST_F(InferDaemonErrorsTest, ModelInfoAndSlots) {
  auto ctx = NewClientContext(absl::Seconds(10));
  v1::GetModelInfoResponse info;
  ASSERT_TRUE(stub_->GetModelInfo(ctx.get(), {}, &info).ok());
  EXPECT_EQ(info.architecture(), "qwen3_5_text");
  EXPECT_EQ(info.vocab_size(), kVocab);
  EXPECT_EQ(info.context_length(), 512u);
  EXPECT_EQ(info.slots(), 1u);
  EXPECT_FALSE(info.compat_digest().empty());
  EXPECT_GT(info.private_state_bytes(), 0u);

  ASSERT_TRUE(Generate(*stub_, TokenRequest(RandomTokens(20, kVocab, 5), 2)).status.ok());
  auto ctx2 = NewClientContext(absl::Seconds(10));
  v1::ListSlotsResponse slots;
  ASSERT_TRUE(stub_->ListSlots(ctx2.get(), {}, &slots).ok());
  ASSERT_EQ(slots.slots_size(), 1);
  EXPECT_EQ(slots.slots(0).state(), v1::SlotInfo::STATE_IDLE);
  EXPECT_EQ(slots.slots(0).tokens(), 21u);  // The prompt and the first generated token.
}

// A request without a request_id gets one of the daemon's (the gateway sends none); one the
// client gives comes back as it is.
TEST_F(InferDaemonErrorsTest, AnEmptyRequestIdIsGeneratedAndAGivenOneKept) {
  const std::vector<int32_t> prompt = RandomTokens(10, kVocab, 3);
  GenerateResult a = Generate(*stub_, TokenRequest(prompt, 1));
  GenerateResult b = Generate(*stub_, TokenRequest(prompt, 1));
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_THAT(a.started.request_id(), ::testing::MatchesRegex("gen-[0-9a-f]{8}-[0-9]+"));
  EXPECT_THAT(b.started.request_id(), ::testing::MatchesRegex("gen-[0-9a-f]{8}-[0-9]+"));
  EXPECT_NE(a.started.request_id(), b.started.request_id());

  v1::GenerateRequest named = TokenRequest(prompt, 1);
  named.set_request_id("client-7");
  GenerateResult c = Generate(*stub_, named);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.started.request_id(), "client-7");
}

TEST_F(InferDaemonTextTest, ChatRequestRendersTokenizesAndStreamsWholeText) {
  v1::GenerateRequest req;
  v1::ChatMessage* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Write a haiku about caches.");
  req.mutable_sampling()->set_max_tokens(24);
  req.mutable_sampling()->set_ignore_eos(true);
  v1::ApplyTemplateResponse rendered;
  ASSERT_TRUE(Render(req.chat(), &rendered).ok());

  GenerateResult r = Generate(*stub_, req);

  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_THAT(rendered.text(), HasSubstr("<|im_start|>user\nWrite a haiku about caches."));
  EXPECT_GT(rendered.stable_boundary(), 0u);
  EXPECT_EQ(r.finished.prompt_tokens(), static_cast<uint32_t>(rendered.ids_size()));
  EXPECT_EQ(r.tokens.size(), 24u);
  auto ctx2 = NewClientContext(absl::Seconds(10));
  v1::DetokenizeRequest dr;
  for (uint32_t id : r.tokens) dr.add_ids(id);
  dr.set_skip_special(true);
  v1::DetokenizeResponse text;
  ASSERT_TRUE(stub_->Detokenize(ctx2.get(), dr, &text).ok());
  EXPECT_EQ(r.text, text.text());
}

TEST_F(InferDaemonTextTest, StopStringEndsTheOutputBeforeIt) {
  // Greedy output is deterministic: find some text in it, then ask to stop there.
  v1::GenerateRequest req;
  req.set_text("The cache remembers");
  req.mutable_sampling()->set_max_tokens(30);
  req.mutable_sampling()->set_ignore_eos(true);
  GenerateResult full = Generate(*stub_, req);
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  // Two whole characters from the third on (proto strings must stay valid UTF-8).
  std::vector<size_t> starts;
  for (size_t i = 0; i < full.text.size(); ++i) {
    if ((static_cast<unsigned char>(full.text[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  starts.push_back(full.text.size());
  ASSERT_GT(starts.size(), 5u) << full.text;
  const std::string stop = full.text.substr(starts[2], starts[4] - starts[2]);
  req.mutable_sampling()->add_stop(stop);

  GenerateResult cut = Generate(*stub_, req);

  ASSERT_TRUE(cut.status.ok()) << cut.status.error_message();
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(cut.finished.reason(), v1::Finished::REASON_STOP);
  EXPECT_EQ(cut.finished.stop_sequence(), stop);  // Anthropic's stop_sequence.
  EXPECT_EQ(full.finished.stop_sequence(), "");
}

TEST_F(InferDaemonTextTest, ReasoningTokensCountTheReasoningBlock) {
  // A prompt that ends inside a reasoning block: everything generated is reasoning until a
  // closing tag, which a random model does not write.
  v1::GenerateRequest req;
  req.set_text("Think first.<think>\n");
  req.set_parse_output(true);
  req.mutable_sampling()->set_max_tokens(12);
  req.mutable_sampling()->set_ignore_eos(true);
  GenerateResult r = Generate(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.finished.completion_tokens(), 12u);
  if (r.text.empty()) {
    EXPECT_EQ(r.finished.reasoning_tokens(), 12u) << r.reasoning;
  } else {
    EXPECT_LT(r.finished.reasoning_tokens(), 12u);
  }

  req.set_text("No thinking here.");
  GenerateResult plain = Generate(*stub_, req);
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  if (plain.reasoning.empty()) {
    EXPECT_EQ(plain.finished.reasoning_tokens(), 0u);
  }
}

TEST_F(InferDaemonTextTest, LogprobsCarryEachTokensRawBytes) {
  v1::GenerateRequest req;
  req.set_text("Bytes of every token:");
  req.mutable_sampling()->set_max_tokens(8);
  req.mutable_sampling()->set_ignore_eos(true);
  req.mutable_sampling()->set_logprobs(2);
  GenerateResult r = Generate(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.logprob_entries.size(), 8u);
  for (const v1::TokenLogprob& lp : r.logprob_entries) {
    auto ctx = NewClientContext(absl::Seconds(10));
    v1::DetokenizeRequest dr;
    dr.add_ids(lp.token_id());
    v1::DetokenizeResponse text;
    ASSERT_TRUE(stub_->Detokenize(ctx.get(), dr, &text).ok());
    EXPECT_FALSE(lp.token_bytes().empty()) << lp.token_id();
    // Where the token is whole characters, its bytes are its text.
    if (text.text().find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_EQ(lp.token_bytes(), text.text()) << lp.token_id();
    }
    ASSERT_EQ(lp.top_size(), 2);
    EXPECT_FALSE(lp.top(0).token_bytes().empty());
  }
}

TEST_F(InferDaemonTextTest, ContinueFinalMessageLeavesTheAssistantTurnOpen) {
  v1::GenerateRequest req;
  v1::ChatMessage* user = req.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content("What is 2+2?");
  v1::ChatMessage* prefill = req.mutable_chat()->add_messages();
  prefill->set_role("assistant");
  prefill->set_content("The answer is");
  req.mutable_chat()->mutable_options()->set_add_generation_prompt(true);
  req.mutable_chat()->mutable_options()->set_continue_final_message(true);
  req.mutable_sampling()->set_max_tokens(4);
  req.mutable_sampling()->set_ignore_eos(true);
  v1::GenerateRequest no_prefill = req;
  no_prefill.mutable_chat()->mutable_messages()->RemoveLast();
  v1::ApplyTemplateResponse rendered;
  const grpc::Status applied = Render(req.chat(), &rendered);
  GenerateResult r = Generate(*stub_, req);
  GenerateResult refused = Generate(*stub_, no_prefill);

  ASSERT_TRUE(applied.ok()) << applied.error_message();
  EXPECT_TRUE(absl::EndsWith(rendered.text(),
                             "<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is"))
      << rendered.text();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.finished.prompt_tokens(), static_cast<uint32_t>(rendered.ids_size()));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("continue_final_message"));
}

TEST_F(InferDaemonTextTest, MediaIsRefused) {
  v1::GenerateRequest req;
  v1::ChatMessage* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("what is in this picture?");
  m->set_has_media(true);

  GenerateResult r = Generate(*stub_, req);

  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("text only"));
}

TEST_F(InferDaemonDemoModelTest, ServesChatWithToolsAndParsesReasoning) {
  v1::GenerateRequest req = ListFilesRequest("You are a coding agent.");
  req.mutable_sampling()->set_max_tokens(12);
  v1::ApplyTemplateResponse rendered;
  const grpc::Status applied = Render(req.chat(), &rendered);

  GenerateResult r = Generate(*stub_, req);

  ASSERT_TRUE(applied.ok()) << applied.error_message();
  EXPECT_THAT(rendered.text(), HasSubstr("<|im_start|>system\nYou are a coding agent.\n\n"));
  EXPECT_THAT(rendered.text(), HasSubstr(R"("name": "list_files")"));
  EXPECT_TRUE(absl::EndsWith(rendered.text(), "<|im_start|>assistant\n<think>\n"))
      << rendered.text();
  // Everything before the generation prompt is repeated by the next turn.
  EXPECT_EQ(rendered.stable_boundary(), static_cast<uint64_t>(rendered.ids_size() - 2));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.finished.prompt_tokens(), static_cast<uint32_t>(rendered.ids_size()));
  EXPECT_EQ(r.tokens.size(), 12u);
  // The prompt opened a <think> block: the noise is reasoning until the model closes it.
  EXPECT_EQ(r.finished.reasoning_content(), r.reasoning);
  EXPECT_FALSE(r.reasoning.empty());
}

TEST_F(InferDaemonDemoModelTest, ToolWithAnObjectTooLargeForAnOrderedParseIsRefused) {
  // Tool definitions are parsed keeping their members' order, quadratic in an object's members
  // (common/json/json_scan.h): 5000 properties are refused, not parsed for seconds.
  v1::GenerateRequest req = ListFilesRequest();
  req.mutable_sampling()->set_max_tokens(2);
  std::string properties;
  for (int i = 0; i < 5000; ++i) {
    properties += (i ? ",\"p" : "\"p") + std::to_string(i) + "\": {\"type\": \"string\"}";
  }
  req.mutable_chat()->add_tools()->set_json(
      R"({"type": "function", "function": {"name": "big", "parameters": {"type": "object",
          "properties": {)" +
      properties + "}}}}");

  GenerateResult r = Generate(*stub_, req);

  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("chat.tools[1]"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("more than 4096 members"));
}

TEST_F(InferDaemonDemoModelTest, JsonNestedTooDeepIsRefusedOrLeftAsText) {
  // Tens of thousands of levels (a few hundred KB) would overflow a thread's stack in the
  // recursive copies and conversions of the parsed JSON.
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  v1::GenerateRequest tools = ListFilesRequest();
  tools.mutable_sampling()->set_max_tokens(2);
  tools.mutable_chat()->add_tools()->set_json(
      R"({"type": "function", "function": {"name": "deep", "parameters": {"type": "object",
          "properties": {"a": {"enum": [)" +
      deep + "]}}}}}");

  // A past call's arguments nested deeper than kMaxTextJsonNesting stay the text they came as:
  // the deep ones then do not fit the context, 100 levels do.
  auto past_call = [&](int depth) {
    v1::GenerateRequest req = ListFilesRequest();
    req.mutable_sampling()->set_max_tokens(2);
    v1::ChatMessage* call = req.mutable_chat()->add_messages();
    call->set_role("assistant");
    v1::ToolCall* c = call->add_tool_calls();
    c->set_id("call_0");
    c->set_name("list_files");
    c->set_arguments_json(R"({"path": )" + std::string(depth, '[') + std::string(depth, ']') + "}");
    v1::ChatMessage* result = req.mutable_chat()->add_messages();
    result->set_role("tool");
    result->set_content("a.txt");
    result->set_tool_call_id("call_0");
    return req;
  };

  GenerateResult refused = Generate(*stub_, tools);
  GenerateResult too_long = Generate(*stub_, past_call(50000));
  GenerateResult served = Generate(*stub_, past_call(100));

  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("chat.tools[1]"));
  EXPECT_THAT(refused.status.error_message(), HasSubstr("nested deeper than 64"));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_long.status.error_message(), HasSubstr("does not fit the context"));
  EXPECT_EQ(ReasonOf(too_long.status), v1::ERROR_REASON_CONTEXT_OVERFLOW);
  EXPECT_EQ(ReasonOf(refused.status), v1::ERROR_REASON_UNSPECIFIED);
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
}

}  // namespace
}  // namespace cairn::infer::testing