#include "tests/integration/services/gateway/real_stack.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status/annotate.h"
#include "common/status/status_macros.h"
#include "services/infer/models/demo_model.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "tests/integration/services/gateway/http_test_client.h"
#include "tests/support/free_port.h"

namespace cairn::gateway::testing {
namespace {

// Vocabulary rows that hold every id of the Qwen3 tokenizer.
constexpr int64_t kQwen3Vocab = 151936;
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

std::string SourceDir() {
  const char* dir = std::getenv("CAIRN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

std::string TokenizerDir() {
  return absl::StrCat(SourceDir(), "/", infer::kDefaultQwen3TokenizerDir);
}

std::string Binary(const std::string& path) { return absl::StrCat(CAIRN_BINARY_DIR, "/", path); }

}  // namespace

bool HaveQwen3Tokenizer() { return std::filesystem::exists(TokenizerDir() + "/tokenizer.json"); }

absl::StatusOr<std::unique_ptr<RealStack>> RealStack::Start(const std::string& dir,
                                                            const RealStackOptions& options) {
  if (!HaveQwen3Tokenizer()) {
    return absl::FailedPreconditionError(
        "the Qwen3 tokenizer is missing; run tools/fetch-test-data");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
  auto stack = std::unique_ptr<RealStack>(new RealStack());
  stack->model_dir_ = dir + "/model";
  ASSIGN_OR_RETURN(infer::RandomCheckpointOptions model,
                   infer::RandomCheckpointPreset(options.preset));
  model.vocab_size = kQwen3Vocab;
  model.max_position_embeddings = std::max(model.max_position_embeddings, options.context_tokens);
  RETURN_IF_ERROR(infer::WriteRandomCheckpoint(stack->model_dir_, model));
  RETURN_IF_ERROR(infer::WriteDemoTextFiles(stack->model_dir_, TokenizerDir()));

  stack->cache_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{
          Binary("services/cache/cairn-cache"), "--listen=unix:" + dir + "/cache.sock",
          "--arena-socket=" + dir + "/arena.sock", "--cache-ram-bytes=512Mi",
          "--cache-disk=" + dir + "/disk", "--cache-disk-bytes=1Gi", "--log-level=warning"},
      "unix:" + dir + "/cache.sock");
  RETURN_IF_ERROR(stack->cache_->Start());
  RETURN_IF_ERROR(Annotate(stack->cache_->WaitServing(options.start_timeout), "cairn-cache"));
  stack->infer_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{
          Binary("services/infer/daemon/cairn-infer"), "--model=" + stack->model_dir_,
          "--sessions=" + std::to_string(options.sessions), "--cache=unix:" + dir + "/cache.sock",
          "--listen=unix:" + dir + "/infer.sock", "--threads=2",
          "--context=" + std::to_string(options.context_tokens), "--log-level=warning"},
      "unix:" + dir + "/infer.sock");
  RETURN_IF_ERROR(stack->infer_->Start());
  RETURN_IF_ERROR(Annotate(stack->infer_->WaitServing(options.start_timeout), "cairn-infer"));

  stack->port_ = ::cairn::testing::FreeLoopbackPort();
  if (stack->port_ == 0) return absl::UnavailableError("no free TCP port on 127.0.0.1");
  stack->gateway_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{Binary("services/gateway/cairn-gateway"),
                               absl::StrCat("--listen=127.0.0.1:", stack->port_),
                               "--infer=unix:" + dir + "/infer.sock",
                               absl::StrCat("--max-output-tokens=", options.max_output_tokens),
                               "--refresh-interval=200ms", "--log-level=warning"},
      "");
  RETURN_IF_ERROR(stack->gateway_->Start());
  // Ready once /health says a daemon is ready (200).
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (absl::Now() < deadline) {
    HttpTestClient client(stack->port_, absl::Seconds(2));
    if (client.Get("/health").status == 200) return stack;
    absl::SleepFor(kPollInterval);  // Polling another process's start.
  }
  return absl::DeadlineExceededError("cairn-gateway never reported a ready daemon on /health");
}

RealStack::~RealStack() { Stop(); }

bool RealStack::Stop() {
  bool clean = true;
  for (std::unique_ptr<ChildProcess>* p : {&gateway_, &infer_, &cache_}) {
    if (*p != nullptr && (*p)->running()) clean &= (*p)->Terminate() == 0;
  }
  return clean;
}

}  // namespace cairn::gateway::testing
