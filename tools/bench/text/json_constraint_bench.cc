// JsonConstraint::Allowed on the real Qwen3 vocabulary, in the states a constrained request
// spends its tokens in.
//
//   tools/fetch-test-data   # the Qwen3 tokenizer
//   CAIRN_SOURCE_DIR=$PWD build/<release>/tools/bench/text/cairn_json_constraint_bench
//
// "Cold" computes the mask (a cache miss: a new constraint advanced to the state, the setup not
// timed); "Warm" asks again in the same state (the constraint's cache).
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer::text {
namespace {

constexpr char kPersonSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "email": {"type": "string", "maxLength": 64},
    "tags": {"type": "array", "items": {"type": "string"}},
    "role": {"enum": ["admin", "user", "guest"]}}, "required": ["name", "age"]})";

// kPersonSchema's properties, then any others with string values.
constexpr char kOpenSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}},
    "additionalProperties": {"type": "string"}})";

enum Grammar { kPerson, kAnyObject, kOpen };

// The texts before each measured state (prefix of a value of the grammar).
struct StateCase {
  const char* name;
  const char* prefix;
  Grammar grammar;
};
constexpr StateCase kStates[] = {
    {"ObjectStart", "{", kPerson},
    {"InsideString", "{\"name\": \"Ada Lovel", kPerson},
    {"InsideBoundedString", "{\"name\": \"Ada\", \"age\": 36, \"email\": \"ada@", kPerson},
    {"AfterKey", "{\"name\":", kPerson},
    {"InsideNumber", "{\"name\": \"Ada\", \"age\": 3", kPerson},
    {"AfterValue", "{\"name\": \"Ada\", \"age\": 36", kPerson},
    {"AnyObjectStart", "{", kAnyObject},
    {"AnyObjectInsideString", "{\"note\": \"hello wor", kAnyObject},
    {"AnyObjectAfterKey", "{\"note\":", kAnyObject},
    {"AdditionalKeyBesideNamedOnes", "{\"zone", kOpen},
};

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenIndex> index;
  std::shared_ptr<const JsonGrammar> person;
  std::shared_ptr<const JsonGrammar> any_object;
  std::shared_ptr<const JsonGrammar> open;
  TokenId end = 0;
};

// Loads the tokenizer and builds the index once for every benchmark (nullptr when absent).
const Fixture* GetFixture() {
  static const Fixture* fixture = []() -> const Fixture* {
    const char* dir = std::getenv("CAIRN_SOURCE_DIR");
    const std::string path = std::string(dir != nullptr ? dir : ".") +
                             "/tests/data/downloads/tokenizer-qwen3/models/tokenizer.json";
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromFile(path);
    if (!t.ok()) return nullptr;
    auto* f = new Fixture();
    f->tokenizer = *std::move(t);
    f->index = TokenIndex::Build(*f->tokenizer);
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(kPersonSchema);
    if (!g.ok()) return nullptr;
    f->person = *g;
    g = JsonGrammar::FromSchema(kOpenSchema);
    if (!g.ok()) return nullptr;
    f->open = *g;
    f->any_object = JsonGrammar::AnyObject();
    f->end = f->tokenizer->TokenToId("<|im_end|>").value_or(0);
    return f;
  }();
  return fixture;
}

// Returns a constraint advanced past `c.prefix`, or nullptr (and the reason) on failure.
std::unique_ptr<JsonConstraint> AtState(const Fixture& f, const StateCase& c, std::string* why) {
  std::unique_ptr<JsonConstraint> constraint =
      JsonConstraint::Create(c.grammar == kPerson      ? f.person
                             : c.grammar == kAnyObject ? f.any_object
                                                       : f.open,
                             f.index.get(), {f.end});
  absl::StatusOr<std::vector<TokenId>> ids = f.tokenizer->Encode(c.prefix);
  if (!ids.ok()) {
    *why = std::string(ids.status().message());
    return nullptr;
  }
  for (TokenId id : *ids) {
    absl::Status s = constraint->Accept(id);
    if (!s.ok()) {
      *why = std::string(s.message());
      return nullptr;
    }
  }
  return constraint;
}

void BM_AllowedCold(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  const StateCase& c = kStates[state.range(0)];
  state.SetLabel(c.name);
  std::vector<uint64_t> mask(static_cast<size_t>(f->index->id_limit()) / 64 + 1);
  for (auto _ : state) {
    state.PauseTiming();
    std::string why;
    std::unique_ptr<JsonConstraint> constraint = AtState(*f, c, &why);
    state.ResumeTiming();
    if (constraint == nullptr) return state.SkipWithError(why.c_str());
    absl::Status s = constraint->Allowed(absl::MakeSpan(mask));
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    state.PauseTiming();
    constraint.reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_AllowedCold)
    ->DenseRange(0, sizeof(kStates) / sizeof(kStates[0]) - 1)
    ->Unit(benchmark::kMicrosecond);

void BM_AllowedWarm(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  const StateCase& c = kStates[state.range(0)];
  state.SetLabel(c.name);
  std::vector<uint64_t> mask(static_cast<size_t>(f->index->id_limit()) / 64 + 1);
  std::string why;
  std::unique_ptr<JsonConstraint> constraint = AtState(*f, c, &why);
  if (constraint == nullptr) return state.SkipWithError(why.c_str());
  for (auto _ : state) {
    absl::Status s = constraint->Allowed(absl::MakeSpan(mask));
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
}
BENCHMARK(BM_AllowedWarm)
    ->DenseRange(0, sizeof(kStates) / sizeof(kStates[0]) - 1)
    ->Unit(benchmark::kMicrosecond);

void BM_BuildIndex(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  for (auto _ : state) benchmark::DoNotOptimize(TokenIndex::Build(*f->tokenizer));
}
BENCHMARK(BM_BuildIndex)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cairn::infer::text
