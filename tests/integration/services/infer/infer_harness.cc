#include "tests/integration/services/infer/infer_harness.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/grpc/client.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "services/infer/engine/sampler.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/models/demo_model.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "tests/unit/services/infer/models/model_test_util.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::testing {

bool HaveQwen3Tokenizer() {
  return std::filesystem::exists(text::testing::Qwen3ModelDir() + "/tokenizer.json");
}

absl::StatusOr<std::string> MakeModelFolder(const std::string& preset, bool qwen3_text,
                                            const std::string& name) {
  ASSIGN_OR_RETURN(RandomCheckpointOptions options, RandomCheckpointPreset(preset));
  if (qwen3_text) options.vocab_size = kQwen3Vocab;
  const std::filesystem::path dir = std::filesystem::path(ScratchDir()) / name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  RETURN_IF_ERROR(WriteRandomCheckpoint(dir.string(), options));
  if (qwen3_text) {
    if (!HaveQwen3Tokenizer()) {
      return absl::NotFoundError("the Qwen3 tokenizer is missing; run tools/fetch-test-data");
    }
    if (preset == "demo") {
      RETURN_IF_ERROR(WriteDemoTextFiles(dir.string(), text::testing::Qwen3ModelDir()));
      return dir.string();
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(std::filesystem::path(text::testing::Qwen3ModelDir()) / f, dir / f,
                                 ec);
      if (ec) return absl::InternalError(absl::StrCat("copying ", f, ": ", ec.message()));
    }
  }
  return dir.string();
}

absl::StatusOr<std::unique_ptr<InferServer>> InferServer::Start(const InferServerOptions& o) {
  auto server = std::unique_ptr<InferServer>(new InferServer());
  ServedModelOptions mo;
  mo.dir = o.model_dir;
  mo.threads = 2;
  mo.context_tokens = o.context_tokens;
  ASSIGN_OR_RETURN(server->model_, ServedModel::Load(mo));
  SlotKvMemoryOptions ko;
  ko.slots = o.slots;
  ko.max_rows = o.context_tokens;
  ASSIGN_OR_RETURN(server->memory_,
                   SlotKvMemory::Create(server->model_->model()->state_layout(), ko));
  InferServer* raw = server.get();
  if (o.make_cache) {
    server->cache_ = o.make_cache(*server->model_, [raw] {
      if (raw->scheduler_ != nullptr) raw->scheduler_->Wake();
    });
  }
  SchedulerOptions so;
  so.max_pass_tokens = o.max_pass_tokens;
  so.max_queue = o.max_queue;
  server->scheduler_ = std::make_unique<Scheduler>(server->model_->model(), server->memory_.get(),
                                                   server->cache_.get(), so);
  server->scheduler_->Start();
  StateCache* cache = server->cache_.get();
  server->service_ = std::make_unique<InferServiceImpl>(
      server->model_.get(), server->scheduler_.get(), &server->pool_,
      [cache] { return cache != nullptr && cache->connected(); }, o.service);
  ServerRunnerOptions ro;
  static int counter = 0;
  ro.listen = absl::StrCat("unix:", ScratchDir(), "/infer-", ++counter, ".sock");
  ro.drain_timeout = absl::Seconds(2);
  ro.max_receive_message_bytes = 64 << 20;
  ASSIGN_OR_RETURN(server->runner_, ServerRunner::Start(ro, {server->service_.get()}));
  server->runner_->SetAllServing(true);
  return server;
}

InferServer::~InferServer() {
  scheduler_->Shutdown(absl::Now() + absl::Seconds(2));
  runner_->Drain();
  runner_->Wait();
  pool_.Shutdown();
  scheduler_.reset();
  cache_.reset();
}

std::unique_ptr<v1::InferService::Stub> InferServer::NewStub() const {
  return v1::InferService::NewStub(NewLocalChannel(address()));
}

GenerateResult Generate(v1::InferService::Stub& stub, const v1::GenerateRequest& request,
                        absl::Duration timeout) {
  GenerateResult r;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(timeout);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub.Generate(ctx.get(), request);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    if (m.has_started()) r.started = m.started();
    if (m.has_delta()) {
      ++r.deltas;
      for (uint32_t id : m.delta().token_ids()) r.tokens.push_back(id);
      for (const v1::TokenLogprob& lp : m.delta().logprobs()) {
        r.logprobs.push_back(lp.logprob());
        r.logprob_entries.push_back(lp);
      }
      r.text += m.delta().text();
      r.reasoning += m.delta().reasoning_text();
    }
    if (m.has_finished()) r.finished = m.finished();
  }
  r.status = reader->Finish();
  return r;
}

v1::GenerateRequest TokenRequest(const std::vector<int32_t>& prompt, uint32_t max_tokens) {
  v1::GenerateRequest req;
  req.mutable_token_ids();
  for (int32_t id : prompt) req.mutable_token_ids()->add_ids(static_cast<uint32_t>(id));
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_logprobs(1);
  req.mutable_sampling()->set_ignore_eos(true);
  return req;
}

std::string TestBackendName() {
  const char* name = std::getenv("CAIRN_TEST_BACKEND");
  return name == nullptr || *name == '\0' ? "cpu" : name;
}

absl::StatusOr<ReferenceRun> RunReference(const std::string& model_dir,
                                          const std::vector<std::vector<int32_t>>& passes,
                                          int max_tokens, bool pass_invariant) {
  std::unique_ptr<KernelBackend> backend;
  if (TestBackendName() == "cpu") {
    backend = TestBackend();
  } else {
    // As the daemon creates it for these numerics (pass-invariant keeps the GPU's row products'
    // inputs exact).
    ASSIGN_OR_RETURN(backend, CreateKernelBackend(
                                  {.name = TestBackendName(), .pass_invariant = pass_invariant}));
  }
  ModelLoadOptions lo;
  lo.qwen3_hybrid.pass_invariant = pass_invariant;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(model_dir, backend.get(), lo));
  int64_t total = 0;
  for (const auto& p : passes) total += static_cast<int64_t>(p.size());
  SlotKvMemoryOptions ko;
  ko.slots = 1;
  ko.max_rows = total + max_tokens + 1;
  ko.memory = backend->memory();
  ASSIGN_OR_RETURN(std::unique_ptr<SlotKvMemory> memory,
                   SlotKvMemory::Create(model->state_layout(), ko));
  std::vector<float> logits;
  std::vector<int32_t> all;
  for (const auto& p : passes) {
    ASSIGN_OR_RETURN(logits, model->Forward(memory->slot(0), p, {}));
    all.insert(all.end(), p.begin(), p.end());
  }
  SamplingOptions so;
  so.logprobs = 1;
  Sampler sampler(so, all);
  ReferenceRun run;
  for (int i = 0; i < max_tokens; ++i) {
    const SampledToken t = sampler.Sample(logits);
    run.tokens.push_back(static_cast<uint32_t>(t.id));
    run.logprobs.push_back(t.logprob);
    if (i + 1 == max_tokens) break;
    ASSIGN_OR_RETURN(logits, model->Forward(memory->slot(0), absl::MakeConstSpan(&t.id, 1), {}));
  }
  return run;
}

}  // namespace cairn::infer::testing
