// cairn-run: a one-shot command for checking models (prints one JSON object).
//
//   cairn-run --model DIR (--prompt-ids FILE | --prompt TEXT) [--greedy N]
//             [--logits-at P1,P2,...] [--top K] [--pass-tokens N] [--json]
//   cairn-run --model DIR (--tokenize-file FILE | --tokenize-batch FILE | --render FILE) [--json]
//
// The text modes and the tokenizer behind --prompt live in services/infer/text/.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/flags.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/run/model_runner.h"
#include "services/infer/text/text_command.h"
#include "services/infer/text/tokenizer.h"

namespace {

struct CliOptions {
  std::string model;
  std::string prompt_ids;
  std::string prompt;
  std::string tokenize_file;
  std::string tokenize_batch;
  std::string render;
  int greedy = 0;
  std::vector<std::string> logits_at;
  int top = 5;
  int64_t pass_tokens = 0;
  std::string backend = "cpu";
  int threads = 0;
  int cpu_spin_us = cairn::infer::kServingCpuSpinMicros;
  bool gpu_bf16_inputs = true;
  bool json = false;
  std::string digest_cache;
};

absl::Status Run(int argc, char** argv) {
  CliOptions o;
  cairn::FlagSet flags("cairn-run", "runs one prompt through a model and prints JSON");
  flags.Add("model", &o.model, "Hugging Face checkpoint folder");
  flags.Add("prompt-ids", &o.prompt_ids, "file with the prompt as a JSON array of token ids");
  flags.Add("prompt", &o.prompt, "prompt text, encoded with the model's tokenizer.json");
  flags.Add("tokenize-file", &o.tokenize_file, "text mode: tokenize a file");
  flags.Add("tokenize-batch", &o.tokenize_batch,
            "text mode: encode and decode the JSON Lines cases of a file (tests/README.md)");
  flags.Add("render", &o.render, "text mode: render a chat template");
  flags.Add("greedy", &o.greedy, "tokens to generate greedily");
  flags.Add("logits-at", &o.logits_at, "prompt positions whose top logits are printed");
  flags.Add("top", &o.top, "logits printed per position");
  flags.Add("pass-tokens", &o.pass_tokens, "prefill pass size (0: one pass)");
  flags.Add("backend", &o.backend,
            absl::StrCat("kernel backend: ",
                         absl::StrJoin(cairn::infer::AvailableKernelBackends(), ", ")));
  flags.Add("threads", &o.threads, "CPU backend threads (0: one per hardware thread)");
  flags.Add("cpu-spin-us", &o.cpu_spin_us,
            "CPU backend: microseconds a helper thread watches for the next loop before sleeping");
  flags.Add("gpu-bf16-inputs", &o.gpu_bf16_inputs,
            "hip backend: bf16 inputs to the matrix units (prefill, decode products); false "
            "keeps them fp32");
  flags.Add("json", &o.json, "print compact JSON (default: indented)");
  flags.Add("digest-cache", &o.digest_cache, "weights digest cache file (empty: none)");
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(argc, argv);
  if (!rest.ok()) return rest.status();
  if (!rest->empty()) return absl::InvalidArgumentError("unexpected positional arguments");
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (!o.tokenize_file.empty() || !o.tokenize_batch.empty() || !o.render.empty()) {
    cairn::infer::text::TextCommandOptions text;
    text.model_dir = o.model;
    text.tokenize_file = o.tokenize_file;
    text.tokenize_batch_file = o.tokenize_batch;
    text.render_file = o.render;
    text.json = o.json;
    return cairn::infer::text::RunTextCommand(text, std::cout);
  }
  if (o.prompt.empty() == o.prompt_ids.empty()) {
    return absl::InvalidArgumentError("give exactly one of --prompt-ids and --prompt");
  }
  cairn::infer::ModelRunOptions run;
  run.model_dir = o.model;
  run.greedy = o.greedy;
  run.top = o.top;
  run.pass_tokens = o.pass_tokens;
  run.backend = o.backend;
  run.threads = o.threads;
  run.cpu_spin_us = o.cpu_spin_us;
  run.gpu_bf16_inputs = o.gpu_bf16_inputs;
  run.digest_cache = o.digest_cache;
  for (const std::string& p : o.logits_at) {
    int64_t v;
    if (!absl::SimpleAtoi(p, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--logits-at: bad position '", p, "'"));
    }
    run.logits_at.push_back(v);
  }
  if (!o.prompt.empty()) {
    absl::StatusOr<std::unique_ptr<cairn::infer::text::Tokenizer>> tokenizer =
        cairn::infer::text::Tokenizer::FromFile(o.model + "/tokenizer.json");
    if (!tokenizer.ok()) return tokenizer.status();
    absl::StatusOr<std::vector<cairn::infer::text::TokenId>> ids = (*tokenizer)->Encode(o.prompt);
    if (!ids.ok()) return ids.status();
    run.prompt_ids.assign(ids->begin(), ids->end());
  } else {
    std::ifstream in(o.prompt_ids);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", o.prompt_ids));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<int32_t>> ids = cairn::infer::ParseTokenIds(text.str());
    if (!ids.ok()) return ids.status();
    run.prompt_ids = *std::move(ids);
  }
  absl::StatusOr<nlohmann::json> out = cairn::infer::RunModelOnce(run);
  if (!out.ok()) return out.status();
  std::cout << out->dump(o.json ? -1 : 2) << "\n";
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status s = Run(argc, argv);
  if (absl::IsCancelled(s)) {  // --help
    std::cout << s.message() << "\n";
    return 0;
  }
  if (!s.ok()) {
    std::cerr << "cairn-run: " << s << "\n";
    return 1;
  }
  return 0;
}
