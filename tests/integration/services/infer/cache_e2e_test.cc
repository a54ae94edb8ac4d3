// cairn-infer and cairn-cache as real processes (docs/architecture.md §5): a conversation continues
// in its live slot, comes back from RAM after another took the slot, from disk after both daemons
// restart, from RAM after only the inference daemon restarts; an edit restores the deepest
// checkpoint before it; conversations sharing a system prompt learn its boundary. In every case
// the output equals an uncached run with the same pass boundaries, bit for bit.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/grpc/client.h"
#include "common/process/child_process.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer::testing {
namespace {

constexpr int64_t kVocab = 1024;
constexpr int64_t kMaxPass = 256;
constexpr uint32_t kGen = 6;

// Where a state's prefill and decode passes ended, from token 0.
using Lineage = std::vector<int64_t>;

// The lineage of the state a request ran from, extended by the request: its restored source
// (cut at the restored depth), its prefill passes and its decode steps (every generated token
// but the last was fed as a one-token pass).
Lineage Extend(const Lineage& source, const GenerateResult& r) {
  Lineage out;
  const int64_t depth = static_cast<int64_t>(r.started.cache().restored_depth());
  for (int64_t e : source) {
    if (e < depth) out.push_back(e);
  }
  if (depth > 0) out.push_back(depth);
  for (uint64_t e : r.started.cache().pass_ends()) out.push_back(static_cast<int64_t>(e));
  const int64_t prompt = r.finished.prompt_tokens();
  for (uint32_t i = 1; i < r.tokens.size(); ++i) out.push_back(prompt + i);
  return out;
}

// Cuts `tokens` (the prompt) at the lineage's ends below its length.
std::vector<std::vector<int32_t>> Passes(const std::vector<int32_t>& tokens, const Lineage& l) {
  std::vector<std::vector<int32_t>> out;
  int64_t at = 0;
  for (int64_t e : l) {
    if (e <= at || e > static_cast<int64_t>(tokens.size())) continue;
    out.emplace_back(tokens.begin() + at, tokens.begin() + e);
    at = e;
  }
  if (at < static_cast<int64_t>(tokens.size())) out.emplace_back(tokens.begin() + at, tokens.end());
  return out;
}

std::vector<int32_t> Append(std::vector<int32_t> a, const std::vector<uint32_t>& b) {
  for (uint32_t id : b) a.push_back(static_cast<int32_t>(id));
  return a;
}
std::vector<int32_t> Append(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Where cairn-cache and cairn-infer are: $CAIRN_TEST_BINARY_DIR (a bundle carried to another
// machine), else this build's folder.
std::string BinaryDir() {
  const char* dir = std::getenv("CAIRN_TEST_BINARY_DIR");
  return dir == nullptr || *dir == '\0' ? std::string(CAIRN_BINARY_DIR) : std::string(dir);
}

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CacheEndToEndTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(ScratchDir(), "/e2e-", GetParam());
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
    absl::StatusOr<std::string> model = MakeModelFolder(GetParam(), false, "e2e-m-" + GetParam());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
    StartCache();
    StartInfer(1);
  }

  // The cache's own pass length is shorter than the inference daemon's (kMaxPass): the plans
  // follow the length the inference daemon sends with its lookups.
  void StartCache() {
    cache_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            BinaryDir() + "/services/cache/cairn-cache", "--listen=unix:" + dir_ + "/cache.sock",
            "--arena-socket=" + dir_ + "/arena.sock", "--cache-ram-bytes=256Mi",
            "--cache-disk=" + dir_ + "/disk", "--cache-disk-bytes=1Gi",
            "--max-pass-tokens=" + std::to_string(kMaxPass / 4), "--log-level=warning"},
        "unix:" + dir_ + "/cache.sock");
    ASSERT_TRUE(cache_->Start().ok());
    absl::Status serving = cache_->WaitServing(absl::Seconds(30));
    ASSERT_TRUE(serving.ok()) << serving;
  }
  void StartInfer(int slots, const std::string& numerics = "fast",
                  const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {BinaryDir() + "/services/infer/daemon/cairn-infer",
                                     "--model=" + model_,
                                     "--backend=" + TestBackendName(),
                                     "--sessions=" + std::to_string(slots),
                                     "--cache=unix:" + dir_ + "/cache.sock",
                                     "--listen=unix:" + dir_ + "/infer.sock",
                                     "--threads=2",
                                     "--context=4096",
                                     "--numerics=" + numerics,
                                     "--max-pass-tokens=" + std::to_string(kMaxPass),
                                     "--log-level=warning"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    infer_ = std::make_unique<ChildProcess>(std::move(argv), "unix:" + dir_ + "/infer.sock");
    ASSERT_TRUE(infer_->Start().ok());
    absl::Status serving = infer_->WaitServing(absl::Seconds(60));
    ASSERT_TRUE(serving.ok()) << serving;
    stub_ = v1::InferService::NewStub(NewLocalChannel(infer_->address()));
    // Wait for the cache session, so that the first request already uses the cache.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(2));
      v1::GetModelInfoResponse info;
      if (stub_->GetModelInfo(ctx.get(), {}, &info).ok() && info.cache_connected()) return;
      absl::SleepFor(absl::Milliseconds(50));  // Polling another process's reconnect.
    }
    FAIL() << "cairn-infer never connected to the cache";
  }

  // Waits until no checkpoint in the cache borrows rows from a slot (idle spill done).
  void WaitSpilled() {
    auto stub = cache::v1::CacheService::NewStub(NewLocalChannel(cache_->address()));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(2));
      cache::v1::ListCheckpointsResponse list;
      bool borrowed = false;
      if (stub->ListCheckpoints(ctx.get(), {}, &list).ok()) {
        for (const auto& c : list.checkpoints()) borrowed |= c.borrowed();
        if (!borrowed) return;
      }
      absl::SleepFor(absl::Milliseconds(50));  // Polling the idle spill of another process.
    }
    FAIL() << "borrowed rows were never spilled";
  }
  // Waits until every checkpoint the cache holds is on disk.
  void WaitPersisted() {
    auto stub = cache::v1::CacheService::NewStub(NewLocalChannel(cache_->address()));
    auto ctx = NewClientContext(absl::Seconds(60));
    cache::v1::FlushResponse unused;
    ASSERT_TRUE(stub->Flush(ctx.get(), {}, &unused).ok());
  }

  // Bytes the cache's RAM tier holds (row chunks, private states and tails).
  int64_t RamUsed() {
    auto stub = cache::v1::CacheService::NewStub(NewLocalChannel(cache_->address()));
    auto ctx = NewClientContext(absl::Seconds(5));
    cache::v1::GetStatusResponse status;
    EXPECT_TRUE(stub->GetStatus(ctx.get(), {}, &status).ok());
    return static_cast<int64_t>(status.ram().used_bytes());
  }

  GenerateResult Run(const std::vector<int32_t>& prompt, const std::string& conversation,
                     uint32_t gen = kGen) {
    v1::GenerateRequest req = TokenRequest(prompt, gen);
    req.set_conversation(conversation);
    GenerateResult r = Generate(*stub_, req);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    return r;
  }

  // Checks `r` against the uncached run of `prompt` with the passes of `lineage`.
  void ExpectExact(const std::vector<int32_t>& prompt, const Lineage& lineage,
                   const GenerateResult& r) {
    absl::StatusOr<ReferenceRun> ref = RunReference(model_, Passes(prompt, lineage), kGen);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(r.tokens, ref->tokens);
    EXPECT_TRUE(SameFloats(r.logprobs, ref->logprobs));
  }

  std::string dir_;
  std::string model_;
  std::unique_ptr<ChildProcess> cache_;
  std::unique_ptr<ChildProcess> infer_;
  std::unique_ptr<v1::InferService::Stub> stub_;
};

TEST_P(CacheEndToEndTest, AgentConversationContinuesLiveThenFromRamAfterAnotherTookTheSlot) {
  const std::vector<int32_t> a1 = RandomTokens(600, kVocab, 1);
  GenerateResult r1 = Run(a1, "A");
  ExpectExact(a1, Extend({}, r1), r1);
  EXPECT_TRUE(r1.finished.cache().cache_available());
  EXPECT_GE(r1.finished.cache().captures(), 1u);
  // Passes of the inference daemon's length, not the cache's quarter of it.
  int64_t at = 0, longest = 0;
  for (uint64_t e : r1.started.cache().pass_ends()) {
    longest = std::max(longest, static_cast<int64_t>(e) - at);
    at = static_cast<int64_t>(e);
  }
  EXPECT_EQ(longest, kMaxPass);

  // Turn 2 continues in place.
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(50, kVocab, 2));
  GenerateResult r2 = Run(a2, "A");
  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_LIVE)
      << r2.started.cache().miss_reason();
  EXPECT_EQ(r2.started.cache().restored_depth(), a1.size() + kGen - 1);
  const Lineage l2 = Extend(Extend({}, r1), r2);
  ExpectExact(a2, l2, r2);

  // Conversation B takes the only slot; A's turn 3 comes back from RAM.
  GenerateResult rb = Run(RandomTokens(300, kVocab, 3), "B");
  ASSERT_TRUE(rb.status.ok());
  const std::vector<int32_t> a3 = Append(Append(a2, r2.tokens), RandomTokens(40, kVocab, 4));
  GenerateResult r3 = Run(a3, "A");
  EXPECT_EQ(r3.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
      << r3.started.cache().miss_reason();
  // B's request kept A's frontier (turn 2's prompt and all but the last answer token) before it
  // overwrote the slot.
  EXPECT_EQ(r3.started.cache().restored_depth(), a2.size() + kGen - 1);
  ExpectExact(a3, Extend(l2, r3), r3);
}

TEST_P(CacheEndToEndTest, ARestoreRunsInTheSlotHoldingItsRowsAndOtherFrontiersStayLive) {
  infer_->Kill();
  StartInfer(2);
  const std::vector<int32_t> a1 = RandomTokens(500, kVocab, 21);
  GenerateResult r1 = Run(a1, "A");
  const std::vector<int32_t> b1 = RandomTokens(300, kVocab, 22);
  GenerateResult rb1 = Run(b1, "B");
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(300, kVocab, 23));
  GenerateResult r2 = Run(a2, "A");
  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_LIVE)
      << r2.started.cache().miss_reason();
  const Lineage l2 = Extend(Extend({}, r1), r2);

  // An edit near the end of A's turn 2 restores a checkpoint; the least recently used slot is
  // B's, but the restore runs in A's slot, which holds the checkpoint's rows.
  std::vector<int32_t> edited = a2;
  const size_t edit_at = a2.size() - 20;
  edited[edit_at] = (edited[edit_at] + 1) % kVocab;
  GenerateResult r3 = Run(edited, "A");
  EXPECT_EQ(r3.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
      << r3.started.cache().miss_reason();
  EXPECT_LE(r3.started.cache().restored_depth(), edit_at);
  ExpectExact(edited, Extend(l2, r3), r3);

  // B's frontier was not overwritten: its next turn continues in place.
  const std::vector<int32_t> b2 = Append(Append(b1, rb1.tokens), RandomTokens(30, kVocab, 24));
  GenerateResult rb2 = Run(b2, "B");
  EXPECT_EQ(rb2.started.cache().restored_from(), v1::CacheResult::TIER_LIVE)
      << rb2.started.cache().miss_reason();
  EXPECT_EQ(rb2.started.cache().restored_depth(), b1.size() + kGen - 1);
  ExpectExact(b2, Extend(Extend({}, rb1), rb2), rb2);
}

TEST_P(CacheEndToEndTest, AfterRestartingOnlyTheInferenceDaemonTheNextTurnComesFromRam) {
  const std::vector<int32_t> a1 = RandomTokens(700, kVocab, 5);
  GenerateResult r1 = Run(a1, "A");
  WaitSpilled();

  infer_->Kill();
  StartInfer(1);
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(30, kVocab, 6));
  GenerateResult r2 = Run(a2, "A");

  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
      << r2.started.cache().miss_reason();
  EXPECT_EQ(r2.started.cache().restored_depth(), a1.size());
  ExpectExact(a2, Extend(Extend({}, r1), r2), r2);
}

TEST_P(CacheEndToEndTest, AfterRestartingBothDaemonsTheNextTurnComesFromDisk) {
  const std::vector<int32_t> a1 = RandomTokens(700, kVocab, 7);
  GenerateResult r1 = Run(a1, "A");
  WaitSpilled();
  WaitPersisted();

  infer_->Kill();
  cache_->Kill();
  StartCache();
  StartInfer(1);
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(30, kVocab, 8));
  GenerateResult r2 = Run(a2, "A");

  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_DISK)
      << r2.started.cache().miss_reason();
  EXPECT_EQ(r2.started.cache().restored_depth(), a1.size());
  ExpectExact(a2, Extend(Extend({}, r1), r2), r2);
}

TEST_P(CacheEndToEndTest, AnEditRestoresTheDeepestCheckpointBeforeIt) {
  const std::vector<int32_t> a1 = RandomTokens(500, kVocab, 9);
  GenerateResult r1 = Run(a1, "A");
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(300, kVocab, 10));
  GenerateResult r2 = Run(a2, "A");
  const Lineage l2 = Extend(Extend({}, r1), r2);

  // Edit one token near the end of turn 2's prompt.
  std::vector<int32_t> edited = a2;
  const size_t edit_at = a2.size() - 20;
  edited[edit_at] = (edited[edit_at] + 1) % kVocab;
  GenerateResult r3 = Run(edited, "A");

  EXPECT_NE(r3.started.cache().restored_from(), v1::CacheResult::TIER_UNSPECIFIED)
      << r3.started.cache().miss_reason();
  EXPECT_LE(r3.started.cache().restored_depth(), edit_at);
  EXPECT_GE(r3.started.cache().restored_depth(), a1.size());  // Turn 2's reuse point or later.
  ExpectExact(edited, Extend(l2, r3), r3);
}

TEST_P(CacheEndToEndTest, ThreeConversationsWithOneSystemPromptShareItsLearnedBoundary) {
  const std::vector<int32_t> system = RandomTokens(900, kVocab, 11);
  const std::vector<int32_t> c1 = Append(system, RandomTokens(700, kVocab, 12));
  const std::vector<int32_t> c2 = Append(system, RandomTokens(200, kVocab, 13));
  const std::vector<int32_t> c3 = Append(system, RandomTokens(150, kVocab, 14));

  GenerateResult r1 = Run(c1, "C1");
  GenerateResult r2 = Run(c2, "C2");
  GenerateResult r3 = Run(c3, "C3");

  // C2 shares 900 tokens with C1's history but C1 left no checkpoint there: it prefills cold
  // (or from an earlier checkpoint) and captures the learned boundary at 900. C3 restores it.
  EXPECT_LT(r2.started.cache().restored_depth(), system.size());
  EXPECT_EQ(r3.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
      << r3.started.cache().miss_reason();
  EXPECT_EQ(r3.started.cache().restored_depth(), system.size());
  const Lineage l1 = Extend({}, r1);
  const Lineage l2 = Extend(l1, r2);
  ExpectExact(c2, l2, r2);
  ExpectExact(c3, Extend(l2, r3), r3);
}

// The slot a request overwrites, when it has a choice (docs/cache-policy.md, "the cheapest slot
// to overwrite"): cairn-infer takes the idle slot whose overwrite spills least into the cache
// (LookupResponse.slot_spills), with --cheapest-slot=false the least recently used one, and with
// --holding-slot-cheapest=false the first of the slots holding the restore equally far. Each
// sequence runs with the rule on and off, on fresh daemons, so the tests fail if the flag
// changes nothing.
class CheapestSlotTest : public CacheEndToEndTest {
 protected:
  // What one sequence left behind: how A's next turn resumed, and the bytes the cache's RAM
  // tier grew by when C's request overwrote a slot (the frontier it preserved).
  struct Outcome {
    GenerateResult a_next;
    int64_t a_frontier = 0;  // Depth of A's frontier (prompt and all but the last answer token).
    int64_t spilled = 0;
  };

  // Fresh daemons with two slots and `flags`. A leaves a long answer in its slot (a full chunk
  // of rows past its prompt's, which no capture made a chunk of and overwriting the slot must
  // spill), B a short one in the other slot, used later. Then C, `preamble` (which A and B
  // start with too; may be empty) and its own tokens, overwrites one of them; A's next turn
  // follows.
  Outcome Sequence(const std::string& name, const std::vector<std::string>& flags,
                   const std::vector<int32_t>& preamble) {
    infer_->Kill();
    cache_->Kill();
    dir_ = absl::StrCat(ScratchDir(), "/e2e-cheapest-", name);
    EXPECT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
    StartCache();
    StartInfer(2, "fast", flags);
    Outcome out;
    const std::vector<int32_t> a1 = Append(preamble, RandomTokens(100, kVocab, 41));
    GenerateResult ra = Run(a1, "A", kLongAnswer);
    const std::vector<int32_t> b1 = Append(preamble, RandomTokens(100, kVocab, 42));
    GenerateResult rb = Run(b1, "B");
    EXPECT_TRUE(ra.status.ok() && rb.status.ok());
    WaitSpilled();  // Only the rows no capture made chunks of are left to spill.

    const int64_t before = RamUsed();
    GenerateResult rc = Run(Append(preamble, RandomTokens(100, kVocab, 43)), "C");
    EXPECT_TRUE(rc.status.ok());
    if (!preamble.empty()) {
      // B learned the preamble's boundary; C restores it, and both slots hold it.
      EXPECT_EQ(rc.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
          << rc.started.cache().miss_reason();
      EXPECT_EQ(rc.started.cache().restored_depth(), preamble.size());
    }
    WaitSpilled();
    out.spilled = RamUsed() - before;

    const std::vector<int32_t> a2 = Append(Append(a1, ra.tokens), RandomTokens(30, kVocab, 44));
    out.a_next = Run(a2, "A");
    out.a_frontier = static_cast<int64_t>(a1.size() + ra.tokens.size()) - 1;
    EXPECT_EQ(ra.tokens.size(), kLongAnswer);
    ExpectExact(a2, Extend(Extend({}, ra), out.a_next), out.a_next);
    return out;
  }

  // Checks that with the rule on C overwrote B's slot (A continues in place) and spilled less
  // than with it off, when C overwrote A's (A restores its preserved frontier from RAM).
  static void ExpectCheapestChosen(const Outcome& on, const Outcome& off) {
    EXPECT_EQ(on.a_next.started.cache().restored_from(), v1::CacheResult::TIER_LIVE)
        << on.a_next.started.cache().miss_reason();
    EXPECT_EQ(on.a_next.started.cache().restored_depth(), on.a_frontier);
    EXPECT_EQ(off.a_next.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
        << off.a_next.started.cache().miss_reason();
    EXPECT_EQ(off.a_next.started.cache().restored_depth(), off.a_frontier);
    // A's answer rows (kLongAnswer tokens) were spilled only with the rule off.
    EXPECT_LT(on.spilled, off.spilled);
  }

  static constexpr uint32_t kLongAnswer = 160;
};

TEST_P(CheapestSlotTest, WithNoSlotHoldingTheRestoreTheSlotThatSpillsLeastIsOverwritten) {
  // A's slot is the least recently used; B's spills less.
  const Outcome on = Sequence("on", {}, {});
  const Outcome off = Sequence("off", {"--cheapest-slot=false"}, {});
  ExpectCheapestChosen(on, off);
}

TEST_P(CheapestSlotTest, AmongSlotsHoldingTheRestoreEquallyFarTheOneThatSpillsLeastIsTaken) {
  // Both slots hold the shared preamble C restores (long enough for B to learn its boundary);
  // A's slot is the first and spills more.
  const std::vector<int32_t> preamble = RandomTokens(600, kVocab, 40);
  const Outcome on = Sequence("holding-on", {}, preamble);
  const Outcome off = Sequence("holding-off", {"--holding-slot-cheapest=false"}, preamble);
  ExpectCheapestChosen(on, off);
}

// Failure tests on one architecture: the other daemon dies in the middle of a request.
class CacheFailureTest : public CacheEndToEndTest {};

TEST_P(CacheFailureTest, KillingTheCacheMidRequestTheRequestCompletesUncached) {
  const std::vector<int32_t> a1 = RandomTokens(1500, kVocab, 21);
  GenerateResult r1;
  std::thread request([&] {
    v1::GenerateRequest req = TokenRequest(a1, 120);
    r1 = Generate(*stub_, req);
  });
  absl::SleepFor(absl::Milliseconds(150));  // Into the prefill's passes.
  cache_->Kill();
  request.join();

  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  EXPECT_EQ(r1.tokens.size(), 120u);
  absl::StatusOr<ReferenceRun> ref = RunReference(model_, Passes(a1, Extend({}, r1)), 120);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r1.tokens, ref->tokens);
  EXPECT_TRUE(SameFloats(r1.logprobs, ref->logprobs));

  // The cache comes back: cairn-infer reconnects and the next requests use it again.
  StartCache();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool connected = false;
  while (!connected && absl::Now() < deadline) {
    auto ctx = NewClientContext(absl::Seconds(2));
    v1::GetModelInfoResponse info;
    connected = stub_->GetModelInfo(ctx.get(), {}, &info).ok() && info.cache_connected();
    if (!connected) absl::SleepFor(absl::Milliseconds(50));  // Polling the reconnect.
  }
  ASSERT_TRUE(connected);
  GenerateResult r2 = Run(RandomTokens(400, kVocab, 22), "B");
  EXPECT_TRUE(r2.finished.cache().cache_available());
  EXPECT_GE(r2.finished.cache().captures(), 1u);
}

TEST_P(CacheFailureTest, KillingTheInferenceDaemonMidRequestDropsOnlyWhatWasNeverSpilled) {
  const std::vector<int32_t> a1 = RandomTokens(700, kVocab, 23);
  GenerateResult r1 = Run(a1, "A");
  WaitSpilled();  // A's checkpoint is safe in the arena.
  // B's request is killed in flight: its captures borrow rows nobody spilled.
  std::thread doomed(
      [&] { (void)Generate(*stub_, TokenRequest(RandomTokens(1800, kVocab, 24), 50)); });
  absl::SleepFor(absl::Milliseconds(300));
  infer_->Kill();
  doomed.join();

  StartInfer(1);
  auto cache = cache::v1::CacheService::NewStub(NewLocalChannel(cache_->address()));
  auto ctx = NewClientContext(absl::Seconds(5));
  cache::v1::ListCheckpointsResponse list;
  ASSERT_TRUE(cache->ListCheckpoints(ctx.get(), {}, &list).ok());
  for (const auto& c : list.checkpoints()) EXPECT_FALSE(c.borrowed()) << c.checkpoint_id();
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(30, kVocab, 25));
  GenerateResult r2 = Run(a2, "A");

  // A's frontier was kept (its rows spilled, its tail and private state copied) before the
  // doomed request took the slot, so it survives the kill.
  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
      << r2.started.cache().miss_reason();
  EXPECT_EQ(r2.started.cache().restored_depth(), a1.size() + kGen - 1);
  ExpectExact(a2, Extend(Extend({}, r1), r2), r2);
}

// With pass-invariant numerics caching changes no bit at all: a conversation restored from RAM
// after another used the slot equals the cold run of its whole prompt in one pass.
TEST_P(CacheFailureTest, PassInvariantRestoreEqualsTheColdSinglePassRun) {
  infer_->Kill();
  StartInfer(1, "pass-invariant");
  const std::vector<int32_t> a1 = RandomTokens(600, kVocab, 31);
  GenerateResult r1 = Run(a1, "A");
  (void)Run(RandomTokens(300, kVocab, 32), "B");
  const std::vector<int32_t> a2 = Append(Append(a1, r1.tokens), RandomTokens(45, kVocab, 33));

  GenerateResult r2 = Run(a2, "A");

  EXPECT_EQ(r2.started.cache().restored_from(), v1::CacheResult::TIER_RAM)
      << r2.started.cache().miss_reason();
  absl::StatusOr<ReferenceRun> ref = RunReference(model_, {a2}, kGen, /*pass_invariant=*/true);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r2.tokens, ref->tokens);
  EXPECT_TRUE(SameFloats(r2.logprobs, ref->logprobs));
}

INSTANTIATE_TEST_SUITE_P(Dense, CacheFailureTest, ::testing::Values("dense"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
INSTANTIATE_TEST_SUITE_P(Hybrid, CheapestSlotTest, ::testing::Values("next"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

INSTANTIATE_TEST_SUITE_P(Architectures, CacheEndToEndTest,
                         ::testing::Values("dense", "next", "moe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer::testing
