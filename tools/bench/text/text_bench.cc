// Tokenizer and chat-template throughput.
//
//   tools/fetch-test-data   # the Qwen3 tokenizer
//   CAIRN_SOURCE_DIR=$PWD build/<release>/tools/bench/text/cairn_text_bench
//
// The source-code corpus is the repository's own C++ (common/ and services/, up to
// kCorpusBytes); bytes_per_second is input bytes encoded per second on one thread.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/file_util.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer::text {
namespace {

constexpr size_t kCorpusBytes = size_t{4} << 20;

std::string SourceDir() {
  const char* dir = std::getenv("CAIRN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

std::string ModelDir() { return SourceDir() + "/tests/data/downloads/tokenizer-qwen3/models"; }

const std::string& SourceCorpus() {
  static const std::string* corpus = [] {
    auto* out = new std::string();
    for (const char* sub : {"common", "services"}) {
      const std::filesystem::path root = std::filesystem::path(SourceDir()) / sub;
      if (!std::filesystem::exists(root)) continue;
      for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
        const std::string ext = e.path().extension().string();
        if (!e.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
        if (e.path().filename() == "unicode_tables.cc") continue;  // Generated numbers.
        absl::StatusOr<std::string> text = ReadFileToString(e.path().string());
        if (text.ok()) *out += *text;
        if (out->size() >= kCorpusBytes) return out;
      }
    }
    return out;
  }();
  return *corpus;
}

// Mixed prose: English, accented Latin, CJK and emoji.
const std::string& ProseCorpus() {
  static const std::string* corpus = [] {
    auto* out = new std::string();
    const std::string para =
        "The quick brown fox jumps over the lazy dog; caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9. "
        "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 "
        "\xF0\x9F\x98\x80 It's 2026-11-29, and 3.14159 is \xCF\x80.\n";
    while (out->size() < (size_t{1} << 20)) *out += para;
    return out;
  }();
  return *corpus;
}

std::unique_ptr<Tokenizer> LoadTokenizer(benchmark::State& state, TokenizerOptions options) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      Tokenizer::FromFile(ModelDir() + "/tokenizer.json", options);
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return nullptr;
  }
  return *std::move(t);
}

void EncodeCorpus(benchmark::State& state, const std::string& corpus, TokenizerOptions options) {
  std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer(state, options);
  if (tokenizer == nullptr) return;
  size_t tokens = 0;
  for (auto _ : state) {
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer->Encode(corpus);
    if (!ids.ok()) {
      state.SkipWithError("encode failed");
      return;
    }
    tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes"] = static_cast<double>(corpus.size());
}

void BM_EncodeSourceCode(benchmark::State& state) {
  EncodeCorpus(state, SourceCorpus(), TokenizerOptions{});
}
BENCHMARK(BM_EncodeSourceCode)->Unit(benchmark::kMillisecond);

// Every word goes through BPE merging (no word cache).
void BM_EncodeSourceCodeNoCache(benchmark::State& state) {
  TokenizerOptions options;
  options.cache_max_words = 0;
  EncodeCorpus(state, SourceCorpus(), options);
}
BENCHMARK(BM_EncodeSourceCodeNoCache)->Unit(benchmark::kMillisecond);

void BM_EncodeMixedProse(benchmark::State& state) {
  EncodeCorpus(state, ProseCorpus(), TokenizerOptions{});
}
BENCHMARK(BM_EncodeMixedProse)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer(state, TokenizerOptions{});
  if (tokenizer == nullptr) return;
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer->Encode(SourceCorpus());
  if (!ids.ok()) return state.SkipWithError("encode failed");
  for (auto _ : state) {
    absl::StatusOr<std::string> text = tokenizer->Decode(*ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * SourceCorpus().size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

// Renders a 40-turn tool-using conversation with the Qwen3 template.
void BM_RenderQwen3Conversation(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::FromModelDir(ModelDir());
  if (!tmpl.ok()) return state.SkipWithError(std::string(tmpl.status().message()).c_str());
  ChatRequest request;
  request.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "run", "description": "Run a command.",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}])");
  request.messages.push_back({{"role", "system"}, {"content", "You are a coding agent."}});
  for (int i = 0; i < 40; ++i) {
    request.messages.push_back({{"role", "user"}, {"content", "Step " + std::to_string(i)}});
    request.messages.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls",
          {{{"type", "function"}, {"function", {{"name", "run"}, {"arguments", {{"cmd", "ls"}}}}}}}}});
    request.messages.push_back({{"role", "tool"}, {"content", std::string(2000, 'x')}});
  }
  size_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<std::string> text = (*tmpl)->Render(request);
    if (!text.ok()) return state.SkipWithError(std::string(text.status().message()).c_str());
    bytes = text->size();
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_RenderQwen3Conversation)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cairn::infer::text
