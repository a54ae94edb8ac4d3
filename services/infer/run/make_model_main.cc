// cairn-make-model: writes a deterministic random-weight Hugging Face checkpoint folder.
//
//   cairn-make-model --out DIR [--preset NAME] [--model-type T] [--seed N] [sizes...]
//                    [--text-files] [--tokenizer-dir DIR]
//
// A preset (random_checkpoint_presets.h) sets every field; explicit flags override it. With
// --text-files (the default for --preset demo) the folder also gets the real Qwen3 tokenizer
// from --tokenizer-dir and the demo chat template, so it serves chat requests.
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "common/config/flags.h"
#include "common/status/status_macros.h"
#include "services/infer/models/demo_model.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace {

absl::Status Run(int argc, char** argv) {
  std::string out;
  std::string preset = "dense";
  // First pass: find the preset, so that the other flags show its values as defaults.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--preset=", 0) == 0) preset = a.substr(9);
    if (a == "--preset" && i + 1 < argc) preset = argv[i + 1];
  }
  absl::StatusOr<cairn::infer::RandomCheckpointOptions> base =
      cairn::infer::RandomCheckpointPreset(preset);
  if (!base.ok()) return base.status();
  cairn::infer::RandomCheckpointOptions o = *base;
  int64_t seed = static_cast<int64_t>(o.seed);
  bool text_files = preset == "demo";
  std::string tokenizer_dir = cairn::infer::kDefaultQwen3TokenizerDir;
  cairn::FlagSet flags("cairn-make-model", "writes a random-weight checkpoint folder");
  flags.Add("out", &out, "output folder");
  flags.Add(
      "preset", &preset,
      "base configuration: " + absl::StrJoin(cairn::infer::RandomCheckpointPresetNames(), ", "));
  flags.Add("model-type", &o.model_type,
            "qwen3_5_text, qwen3_5, qwen3_next, qwen3_5_moe_text, qwen3_5_moe");
  flags.Add("seed", &seed, "weights seed");
  flags.Add("vocab-size", &o.vocab_size, "vocabulary rows");
  flags.Add("hidden-size", &o.hidden_size, "model width");
  flags.Add("intermediate-size", &o.intermediate_size, "dense MLP width");
  flags.Add("layers", &o.num_layers, "decoder layers");
  flags.Add("heads", &o.num_heads, "attention query heads");
  flags.Add("kv-heads", &o.num_kv_heads, "attention kv heads");
  flags.Add("head-dim", &o.head_dim, "attention head width");
  flags.Add("linear-k-heads", &o.linear_k_heads, "GDN q/k heads");
  flags.Add("linear-v-heads", &o.linear_v_heads, "GDN v heads");
  flags.Add("linear-k-dim", &o.linear_k_dim, "GDN key head width");
  flags.Add("linear-v-dim", &o.linear_v_dim, "GDN value head width");
  flags.Add("experts", &o.num_experts, "MoE experts");
  flags.Add("top-k", &o.top_k, "experts per token");
  flags.Add("tie-word-embeddings", &o.tie_word_embeddings, "tie lm_head to the embeddings");
  flags.Add("shards", &o.shards, "safetensors files");
  flags.Add("max-positions", &o.max_position_embeddings, "config.json max_position_embeddings");
  flags.Add("text-files", &text_files,
            "add the Qwen3 tokenizer and the demo chat template (needs the Qwen3 vocabulary)");
  flags.Add("tokenizer-dir", &tokenizer_dir,
            "folder with the Qwen3 tokenizer.json and tokenizer_config.json (tools/fetch-test-data "
            "puts them in the default, relative to the repository root)");
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(argc, argv);
  if (!rest.ok()) return rest.status();
  if (out.empty()) return absl::InvalidArgumentError("--out is required");
  if (seed < 0) return absl::InvalidArgumentError("--seed must be >= 0");
  o.seed = static_cast<uint64_t>(seed);
  if (text_files) {
    // Fail before writing tens of megabytes of weights.
    RETURN_IF_ERROR(cairn::infer::CheckDemoTokenizerDir(tokenizer_dir));
  }
  RETURN_IF_ERROR(cairn::infer::WriteRandomCheckpoint(out, o));
  if (!text_files) return absl::OkStatus();
  return cairn::infer::WriteDemoTextFiles(out, tokenizer_dir);
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status s = Run(argc, argv);
  if (absl::IsCancelled(s)) {
    std::cout << s.message() << "\n";
    return 0;
  }
  if (!s.ok()) {
    std::cerr << "cairn-make-model: " << s << "\n";
    return 1;
  }
  return 0;
}
