// JsonConstraint::Allowed on the real Qwen3 vocabulary, in the states a constrained request
// spends its tokens in.
//
//   tools/fetch-test-data   # the Qwen3 tokenizer
//   CAIRN_SOURCE_DIR=$PWD build/<release>/tools/bench/text/cairn_json_constraint_bench
//
// "Cold" computes the mask (a cache miss: a new constraint advanced to the state, the setup not
// timed); "Warm" asks again in the same state (the constraint's cache); "InBuiltClass" computes
// it in a new state of a string with a pattern whose token class an earlier mask built.
// "ForcedToolCall" compiles a forced call's grammar over agent-like tools and takes its first
// mask; "Xml" the same in the XML form, and the cost per token of a file's text in a call.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/tokenizer.h"
#include "services/infer/text/tool_call_grammar.h"

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

// Strings with formats and patterns (what pydantic's UUID, datetime and EmailStr fields and a
// constr(pattern=...) send), and an unanchored pattern beside maxLength.
constexpr char kFormatsSchema[] = R"({"type": "object", "properties": {
    "id": {"type": "string", "format": "uuid"},
    "when": {"type": "string", "format": "date-time"},
    "email": {"type": "string", "format": "email"},
    "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
    "note": {"type": "string", "pattern": "TODO", "maxLength": 200},
    "text": {"type": "string", "pattern": "^[^<>]*$"}},
    "required": ["id", "when", "email", "code", "note", "text"]})";

enum Grammar { kPerson, kAnyObject, kOpen, kFormats };

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
    {"InsideUuid", "{\"id\": \"2eb8aa08-aa", kFormats},
    {"InsideDateTime", "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": \"2024-02-2",
     kFormats},
    {"InsideEmail",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": "
     "\"2024-02-29T10:00:00Z\", \"email\": \"ada.lovel",
     kFormats},
    {"InsideEmailDomain",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": "
     "\"2024-02-29T10:00:00Z\", \"email\": \"ada@exam",
     kFormats},
    {"BeforeUnanchoredMatch",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": "
     "\"2024-02-29T10:00:00Z\", \"email\": \"ada@example.com\", \"code\": \"ABC-1234\", "
     "\"note\": \"see the",
     kFormats},
    {"AfterUnanchoredMatch",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": "
     "\"2024-02-29T10:00:00Z\", \"email\": \"ada@example.com\", \"code\": \"ABC-1234\", "
     "\"note\": \"TODO: fix",
     kFormats},
    {"InsideNegatedClassPattern",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", "
     "\"when\": \"2024-02-29T10:00:00Z\", \"email\": \"ada@example.com\", \"code\": "
     "\"ABC-1234\", \"note\": \"TODO\", \"text\": \"hello wor",
     kFormats},
};

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenIndex> index;
  std::shared_ptr<const JsonGrammar> person;
  std::shared_ptr<const JsonGrammar> any_object;
  std::shared_ptr<const JsonGrammar> open;
  std::shared_ptr<const JsonGrammar> formats;
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
    g = JsonGrammar::FromSchema(kFormatsSchema);
    if (!g.ok()) return nullptr;
    f->formats = *g;
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
                             : c.grammar == kOpen      ? f.open
                                                       : f.formats,
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

// Inside a string with a pattern and maxLength: each token is a new state (the count), whose
// mask comes from the pattern token class of the automaton's state, built for an earlier token.
struct ClassCase {
  const char* name;
  const char* prefix;  // Up to a state whose mask builds the class.
  const char* then;    // Read after it: the same automaton state, a different count.
};
constexpr ClassCase kClassStates[] = {
    {"BoundedBeforeUnanchoredMatch",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": \"2024-02-29T10:00:00Z\", "
     "\"email\": \"ada@example.com\", \"code\": \"ABC-1234\", \"note\": \"see the",
     " notes"},
    {"BoundedAfterUnanchoredMatch",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": \"2024-02-29T10:00:00Z\", "
     "\"email\": \"ada@example.com\", \"code\": \"ABC-1234\", \"note\": \"TODO: fix",
     " it"},
    {"EmailLocalPart",
     "{\"id\": \"2eb8aa08-aa98-11ea-b4aa-73b441d16380\", \"when\": \"2024-02-29T10:00:00Z\", "
     "\"email\": \"ada",
     "lovelace"},
};

void BM_AllowedInBuiltClass(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  const ClassCase& c = kClassStates[state.range(0)];
  state.SetLabel(c.name);
  std::vector<uint64_t> mask(static_cast<size_t>(f->index->id_limit()) / 64 + 1);
  for (auto _ : state) {
    state.PauseTiming();
    std::string why;
    const StateCase at = {c.name, c.prefix, kFormats};
    std::unique_ptr<JsonConstraint> constraint = AtState(*f, at, &why);
    absl::Status s = constraint == nullptr ? absl::InternalError(why)
                                           : constraint->Allowed(absl::MakeSpan(mask));
    absl::StatusOr<std::vector<TokenId>> then = f->tokenizer->Encode(c.then);
    if (s.ok() && !then.ok()) s = then.status();
    for (size_t i = 0; s.ok() && i < then->size(); ++i) s = constraint->Accept((*then)[i]);
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    state.ResumeTiming();
    s = constraint->Allowed(absl::MakeSpan(mask));
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    state.PauseTiming();
    constraint.reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_AllowedInBuiltClass)
    ->DenseRange(0, sizeof(kClassStates) / sizeof(kClassStates[0]) - 1)
    ->Unit(benchmark::kMicrosecond);

// `n` functions shaped like a coding agent's (an edit tool's parameters, each named apart).
nlohmann::ordered_json AgentTools(int n) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (int i = 0; i < n; ++i) {
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "edit_file_" + std::to_string(i)},
                       {"description", "Replaces text in a file."},
                       {"parameters", nlohmann::ordered_json::parse(R"({"type": "object",
                           "properties": {"file_path": {"type": "string"},
                           "old_string": {"type": "string"}, "new_string": {"type": "string"},
                           "replace_all": {"type": "boolean", "default": false},
                           "context_lines": {"type": "integer", "minimum": 0}},
                           "required": ["file_path", "old_string", "new_string"],
                           "additionalProperties": false})")}}}});
  }
  return tools;
}

// ForcedToolCallGrammar for tool_choice "required" over range(0) functions: what a forced
// request pays before its first token (every function compiled alone, then together).
void BM_ForcedToolCallGrammar(benchmark::State& state) {
  const nlohmann::ordered_json tools = AgentTools(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = ForcedToolCallGrammar(tools, "");
    if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
    benchmark::DoNotOptimize(*g);
  }
}
BENCHMARK(BM_ForcedToolCallGrammar)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

// The first mask of a "required" call over range(0) functions (the name's choice), computed
// afresh.
void BM_ForcedToolCallFirstMask(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      ForcedToolCallGrammar(AgentTools(static_cast<int>(state.range(0))), "");
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  std::vector<uint64_t> mask(static_cast<size_t>(f->index->id_limit()) / 64 + 1);
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*g, f->index.get(), {});
    state.ResumeTiming();
    absl::Status s = c->Allowed(absl::MakeSpan(mask));
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
}
BENCHMARK(BM_ForcedToolCallFirstMask)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond);

// ForcedToolCallGrammar in the XML form (Qwen3.5's templates) over range(0) functions.
void BM_XmlForcedToolCallGrammar(benchmark::State& state) {
  const nlohmann::ordered_json tools = AgentTools(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
        ForcedToolCallGrammar(tools, "", ToolCallMarkup::kXml);
    if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
    benchmark::DoNotOptimize(*g);
  }
}
BENCHMARK(BM_XmlForcedToolCallGrammar)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

// A forced XML call writing a file's text into a string parameter (new_string), token by
// token: Accept then Allowed per token, over 60 lines of code (the masks come from the raw-text
// classes, built by the first iteration, and the constraint's cache).
void BM_XmlCallFileTextPerToken(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      ForcedToolCallGrammar(AgentTools(1), "edit_file_0", ToolCallMarkup::kXml);
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  std::string text =
      "<parameter=file_path>\nsrc/main.cc\n</parameter>\n"
      "<parameter=old_string>\nint x;\n</parameter>\n"
      "<parameter=new_string>\n";
  const size_t head = text.size();
  for (int i = 0; i < 60; ++i) {
    text += "  if (values[" + std::to_string(i) + "] < limit && !done) { total += \"</\"; }\n";
  }
  absl::StatusOr<std::vector<TokenId>> ids = f->tokenizer->Encode(text);
  absl::StatusOr<std::vector<TokenId>> head_ids = f->tokenizer->Encode(text.substr(0, head));
  if (!ids.ok() || !head_ids.ok()) return state.SkipWithError("encode failed");
  std::vector<uint64_t> mask(static_cast<size_t>(f->index->id_limit()) / 64 + 1);
  int64_t tokens = 0;
  for (auto _ : state) {
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*g, f->index.get(), {});
    for (TokenId id : *ids) {
      absl::Status s = c->Allowed(absl::MakeSpan(mask));
      if (s.ok()) s = c->Accept(id);
      if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    }
    tokens += static_cast<int64_t>(ids->size());
  }
  state.counters["file_tokens"] = static_cast<double>(ids->size() - head_ids->size());
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_XmlCallFileTextPerToken)->Unit(benchmark::kMillisecond);

void BM_BuildIndex(benchmark::State& state) {
  const Fixture* f = GetFixture();
  if (f == nullptr) return state.SkipWithError("no Qwen3 tokenizer: run tools/fetch-test-data");
  for (auto _ : state) benchmark::DoNotOptimize(TokenIndex::Build(*f->tokenizer));
}
BENCHMARK(BM_BuildIndex)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cairn::infer::text
