// Generate requests to the inference daemon (proto/cairn/infer/v1/infer.proto), in process:
// the bytes are parsed as a GenerateRequest, as gRPC does, and validated, rendered and
// tokenized by InferServiceImpl::Prepare, everything a request does before the scheduler
// sees it. The served model has random weights, the real Qwen3 tokenizer and chat template
// when tools/fetch-test-data has run (CAIRN_SOURCE_DIR names the repository), and token-id
// prompts only otherwise.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cairn/infer/v1/infer.pb.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "google/protobuf/stubs/logging.h"
#include "services/infer/daemon/infer_service.h"
#include "services/infer/daemon/served_model.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "services/infer/text/output_parser.h"
#include "tests/fuzz/fuzz_target.h"

namespace cairn::infer {
namespace {

constexpr int64_t kQwen3Vocab = 151936;
constexpr int64_t kContextTokens = 4096;

// The daemon's request path without its gRPC server and scheduler thread. Built once per
// process and never destroyed (fuzz targets run until the process exits).
struct Fixture {
  std::unique_ptr<ServedModel> model;
  std::unique_ptr<SlotKvMemory> memory;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<InferServiceImpl> service;
};

std::string MakeModelDir() {
  const char* source = std::getenv("CAIRN_SOURCE_DIR");
  const std::filesystem::path tokenizer_dir =
      std::filesystem::path(source != nullptr ? source : ".") /
      "tests/data/downloads/tokenizer-qwen3/models";
  const bool text = std::filesystem::exists(tokenizer_dir / "tokenizer.json");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cairn-fuzz-infer-" + std::to_string(::getpid()));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  RandomCheckpointOptions options;
  options.num_layers = 4;
  options.tie_word_embeddings = true;
  if (text) options.vocab_size = kQwen3Vocab;
  CAIRN_CHECK(WriteRandomCheckpoint(dir.string(), options).ok());
  if (text) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(tokenizer_dir / f, dir / f, ec);
      CAIRN_CHECK(!ec);
    }
  }
  return dir.string();
}

Fixture* NewFixture() {
  SetMinLogLevel(LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);  // Invalid UTF-8 in strings is routine here.
  auto* f = new Fixture();
  const std::string dir = MakeModelDir();
  ServedModelOptions mo;
  mo.dir = dir;
  mo.threads = 1;
  mo.context_tokens = kContextTokens;
  absl::StatusOr<std::unique_ptr<ServedModel>> model = ServedModel::Load(mo);
  CAIRN_CHECK(model.ok());
  f->model = std::move(*model);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // Weights are mapped; the tokenizer is in memory.
  SlotKvMemoryOptions ko;
  ko.slots = 1;
  ko.max_rows = kContextTokens;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
      SlotKvMemory::Create(f->model->model()->state_layout(), ko);
  CAIRN_CHECK(memory.ok());
  f->memory = std::move(*memory);
  f->scheduler =
      std::make_unique<Scheduler>(f->model->model(), f->memory.get(), nullptr, SchedulerOptions{});
  f->service = std::make_unique<InferServiceImpl>(
      f->model.get(), f->scheduler.get(), /*pool=*/nullptr, [] { return false; },
      InferServiceOptions{});
  return f;
}

// The model, its tokenizer and the service, made once (the first input's call, or
// LLVMFuzzerInitialize's) and kept for the process.
Fixture* SharedFixture() {
  static Fixture* const fixture = NewFixture();
  return fixture;
}

}  // namespace
}  // namespace cairn::infer

#ifdef CAIRN_FUZZ_ENGINE
// libFuzzer calls this once before the first input, outside every input's -timeout: loading the
// model and the Qwen3 tokenizer under ASan takes seconds, over ten on a loaded machine, which
// the smoke run's first input used to be charged with (a timeout reported as a finding).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cairn::infer::SharedFixture();
  return 0;
}
#endif

CAIRN_FUZZ_TARGET(InferRpc) {
  cairn::infer::Fixture* const fixture = cairn::infer::SharedFixture();
  cairn::infer::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  cairn::infer::text::OutputParserOptions parser;
  absl::StatusOr<cairn::infer::GenerateRequest> prepared =
      fixture->service->Prepare(request, &parser);
  if (prepared.ok()) {
    const int64_t vocab = fixture->model->model()->info().vocab_size;
    for (int32_t id : prepared->prompt) CAIRN_CHECK(id >= 0 && id < vocab);
    // A forced tool call's opening parses as the answer's start; alone it is an unterminated
    // call, returned as content.
    cairn::infer::text::OutputParser output(parser);
    cairn::infer::text::ParsedOutput tail = output.Finish();
    CAIRN_CHECK(tail.tool_calls.empty());
  }
  return 0;
}
