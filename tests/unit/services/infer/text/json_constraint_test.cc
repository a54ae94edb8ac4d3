#include "services/infer/text/json_constraint.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/engine/token_constraint.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/token_index.h"
#include "services/infer/text/tokenizer.h"
#include "services/infer/text/unicode.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/text/json_test_util.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::text {
namespace {

using ::cairn::infer::TokenAllowed;
using ::cairn::testing::StatusIs;
using testing::Compiled;
using testing::OrderedJson;

constexpr TokenId kEnd = 1000;
constexpr TokenId kOtherSpecial = 1001;

// The byte-level BPE alphabet: the vocabulary's spelling of raw byte `b`.
std::string ByteLevel(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    uint32_t cp = b;
    if (!printable) {
      uint32_t shifted = 0;
      for (int c = 0; c < b; ++c) {
        const bool p = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
        shifted += p ? 0 : 1;
      }
      cp = 256 + shifted;
    }
    unicode::AppendUtf8(cp, &out);
  }
  return out;
}

// The Qwen2 split regex (the tokenizer needs one; these tests never encode).
constexpr const char* kQwenSplit =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Every single byte, plus tokens that span JSON's structural boundaries.
const std::vector<std::string>& MultiByteTokens() {
  static const auto* tokens =
      new std::vector<std::string>{"\"}",        "\",\n \"", "{\"",          "\":",
                                   "\": \"",     "\"name",   "name",         "\"a\"",
                                   "true",       "null",     "},",           "]}",
                                   "  ",         "\n  ",     "12",           ".5",
                                   "e+",         "\xC3\xA9", "\xE4\xBD",     "\xA0\"",
                                   "ab",         "abc",      "\" ",          "\"}]",
                                   "\\u",        "\\n",      "[{\"",         "\"v\":",
                                   "\"kids\":[", ",\"",      "\"x\":[1,2]}", "\"tags",
                                   "\":[\"",     "\"]",      "\"],\"",       "1,",
                                   "-0",         "false}",   "\"kind\":",    "{}",
                                   "[]",         "\"\"",     " {",           "\\uD83D",
                                   "id\":",      "7,",       "\"\\\"",       ": ",
                                   ", ",         "\n",       "\n\n",         "                "};
  return *tokens;
}

std::unique_ptr<Tokenizer> SyntheticTokenizer() {
  OrderedJson vocab = OrderedJson::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[ByteLevel(std::string(1, static_cast<char>(b)))] = id++;
  for (const std::string& t : MultiByteTokens()) {
    if (!vocab.contains(ByteLevel(t))) vocab[ByteLevel(t)] = id++;
  }
  OrderedJson j = {
      {"added_tokens",
       {{{"id", kEnd}, {"content", "<|end|>"}, {"special", true}},
        {{"id", kOtherSpecial}, {"content", "<|other|>"}, {"special", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kQwenSplit}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", OrderedJson::array()}}},
  };
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::vector<TokenId> AllowedIds(absl::Span<const uint64_t> mask, TokenId limit) {
  std::vector<TokenId> ids;
  for (TokenId id = 0; id < limit; ++id) {
    if (TokenAllowed(mask, id)) ids.push_back(id);
  }
  return ids;
}

// Walks `walks` random paths through the grammar of `schema`, choosing only allowed tokens, and
// checks at each step that: the mask is exactly the tokens whose bytes the matcher accepts
// (so every refused token leads to text that cannot be completed, as every matcher state can
// be: CompleteGreedily shows it), the end token comes exactly where the value is complete, and
// each finished text parses and satisfies the schema.
void RandomWalks(const Tokenizer& tokenizer, const TokenIndex& index, const std::string& schema,
                 int walks, int max_steps, bool check_every_token) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      schema.empty() ? JsonGrammar::AnyObject() : JsonGrammar::FromSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  const OrderedJson s = schema.empty() ? OrderedJson::parse(R"({"type":"object",
      "additionalProperties": true})")
                                       : OrderedJson::parse(schema);
  const auto* trie = static_cast<const TrieTokenIndex*>(&index);
  std::mt19937 rng(1234);
  int finished = 0;
  for (int w = 0; w < walks; ++w) {
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*g, &index, {kEnd});
    json::ByteMatcher m(Compiled(*g));
    std::string text;
    std::vector<uint64_t> mask(index.id_limit() / 64 + 2);
    for (int step = 0; step < max_steps; ++step) {
      ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok()) << text;
      const std::vector<TokenId> allowed = AllowedIds(mask, static_cast<TokenId>(mask.size() * 64));
      ASSERT_FALSE(allowed.empty());
      ASSERT_EQ(TokenAllowed(mask, kEnd), m.Complete()) << text;
      EXPECT_FALSE(TokenAllowed(mask, kOtherSpecial));
      if (check_every_token || step % 8 == 0) {
        for (TokenId id = 0; id < index.id_limit(); ++id) {
          if (id == kEnd || tokenizer.IsSpecial(id)) continue;
          json::ByteMatcher next = m;
          const std::string_view bytes = trie->bytes(id);
          const bool fits = !bytes.empty() && next.AdvanceAll(bytes);
          ASSERT_EQ(TokenAllowed(mask, id), fits) << "token " << id << " after " << text;
        }
        std::string rest;
        ASSERT_TRUE(testing::Complete(m, &rest)) << text;
        const OrderedJson v = OrderedJson::parse(text + rest, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << text + rest;
        ASSERT_TRUE(testing::Validate(v, s, s)) << text + rest;
      }
      // Prefer ending, and closing once the walk is long, so that most walks finish.
      TokenId pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (TokenAllowed(mask, kEnd) && rng() % 2 == 0) pick = kEnd;
      if (step > max_steps / 2) {
        for (TokenId id : allowed) {
          const std::string_view b = trie->bytes(id);
          if (id == kEnd || (b.size() == 1 && (b[0] == '}' || b[0] == ']' || b[0] == '"'))) {
            pick = id;
            break;
          }
        }
      }
      ASSERT_TRUE(c->Accept(pick).ok()) << pick;
      if (pick == kEnd) {
        const OrderedJson v = OrderedJson::parse(text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << text;
        EXPECT_TRUE(testing::Validate(v, s, s)) << text;
        EXPECT_THAT(c->Allowed(absl::MakeSpan(mask)),
                    StatusIs(absl::StatusCode::kFailedPrecondition));
        EXPECT_THAT(c->Accept(kEnd), StatusIs(absl::StatusCode::kFailedPrecondition));
        ++finished;
        break;
      }
      ASSERT_TRUE(m.AdvanceAll(trie->bytes(pick)));
      text += trie->bytes(pick);
    }
  }
  EXPECT_GT(finished, walks / 2);
}

const char* const kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string"},
        "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string",
        "maxLength": 5}, "maxItems": 3}, "kind": {"enum": ["a", "ab", 1, null, {"x": [1, 2]}]}},
        "required": ["name", "kind"]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})",
    R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]},
        {"type": "string", "minLength": 2, "maxLength": 4}]})",
    R"({"type": "object", "properties": {"id": {"const": 7}},
        "additionalProperties": {"type": "integer"}})",
    R"({"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "null"}], "minItems": 1})",
    "",  // AnyObject.
};

TEST(JsonConstraintTest, RandomWalksStayInsideTheSchemaOnASyntheticVocabulary) {
  std::unique_ptr<Tokenizer> tokenizer = SyntheticTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  std::unique_ptr<TokenIndex> index = TokenIndex::Build(*tokenizer);
  for (const char* schema : kSchemas) {
    SCOPED_TRACE(schema);
    RandomWalks(*tokenizer, *index, schema, /*walks=*/30, /*max_steps=*/60,
                /*check_every_token=*/true);
  }
}

TEST(JsonConstraintTest, EndTokensOnlyWhereCompleteAndAloneWhenNothingCanFollow) {
  std::unique_ptr<Tokenizer> tokenizer = SyntheticTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  std::unique_ptr<TokenIndex> index = TokenIndex::Build(*tokenizer);
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"type": "integer"})");
  ASSERT_TRUE(g.ok()) << g.status();
  std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*g, index.get(), {kEnd});
  std::vector<uint64_t> mask(index->id_limit() / 64 + 1);
  const TokenId one = *tokenizer->TokenToId("1");
  const TokenId twelve = *tokenizer->TokenToId("12");

  ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
  EXPECT_FALSE(TokenAllowed(mask, kEnd));
  EXPECT_THAT(c->Accept(kEnd), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(c->Accept(twelve).ok());
  ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
  EXPECT_TRUE(TokenAllowed(mask, kEnd));
  EXPECT_TRUE(TokenAllowed(mask, one));  // A number can still extend.
  EXPECT_THAT(c->Accept(*tokenizer->TokenToId("a")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(c->Accept(kOtherSpecial), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(c->Complete());

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> b =
      JsonGrammar::FromSchema(R"({"type": "boolean"})");
  ASSERT_TRUE(b.ok()) << b.status();
  std::unique_ptr<JsonConstraint> d = JsonConstraint::Create(*b, index.get(), {kEnd});
  ASSERT_TRUE(d->Accept(*tokenizer->TokenToId("true")).ok());
  ASSERT_TRUE(d->Allowed(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(AllowedIds(mask, static_cast<TokenId>(mask.size() * 64)), std::vector<TokenId>{kEnd});
}

// The synthetic vocabulary with its index, for tests that drive one constraint by hand.
struct SyntheticVocabulary {
  std::unique_ptr<Tokenizer> tokenizer = SyntheticTokenizer();
  std::unique_ptr<TokenIndex> index =
      tokenizer != nullptr ? TokenIndex::Build(*tokenizer) : nullptr;
  // The id of `token`, which the vocabulary must have.
  TokenId Id(const std::string& token) const { return *tokenizer->TokenToId(token); }
};

// Strings with patterns and formats: their masks come from pattern token classes (or, where the
// automaton accepts everything, the index's string classes).
const char* const kPatternSchemas[] = {
    R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
        "at": {"type": "string", "format": "date-time"}, "ip": {"type": "string",
        "format": "ipv4"}}, "required": ["id", "at", "ip"]})",
    R"({"type": "array", "items": {"anyOf": [{"type": "string", "pattern": "^[a-c]{2,4}$"},
        {"type": "string", "pattern": "ab", "maxLength": 6}, {"type": "string", "format":
        "duration"}, {"type": "string", "format": "email", "maxLength": 12}]}, "maxItems": 3})",
    R"({"type": "object", "properties": {"name": {"type": "string", "pattern":
        "^[^\\u0000-\\u001f\"\\\\]*\\u00e9", "minLength": 2, "maxLength": 8}},
        "additionalProperties": {"type": "string", "pattern": "^(?:\\\\|\\n|u)+$"}})",
};

TEST(JsonConstraintTest, RandomWalksWithPatternsStayInsideTheSchema) {
  const SyntheticVocabulary v;
  ASSERT_NE(v.index, nullptr);
  for (const char* schema : kPatternSchemas) {
    SCOPED_TRACE(schema);
    RandomWalks(*v.tokenizer, *v.index, schema, /*walks=*/20, /*max_steps=*/240,
                /*check_every_token=*/true);
  }
}

TEST(JsonConstraintTest, AnEndIdThatSpellsTextIsAllowedOnlyWhereTheValueIsComplete) {
  // A model whose EOS token is not marked special: its bytes fit inside a string, but Accept
  // reads it as the end, so allowing it there would end the request with an error.
  const SyntheticVocabulary v;
  ASSERT_NE(v.index, nullptr);
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> string_schema =
      JsonGrammar::FromSchema(R"({"type": "string"})");
  ASSERT_TRUE(string_schema.ok()) << string_schema.status();
  const TokenId end = v.Id("ab");
  ASSERT_FALSE(v.tokenizer->IsSpecial(end));
  std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*string_schema, v.index.get(), {end});
  std::vector<uint64_t> mask(v.index->id_limit() / 64 + 1);
  ASSERT_TRUE(c->Accept(v.Id("\"")).ok());

  ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
  EXPECT_FALSE(TokenAllowed(mask, end));
  EXPECT_TRUE(TokenAllowed(mask, v.Id("abc")));
  ASSERT_TRUE(c->Accept(v.Id("\"")).ok());
  ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(AllowedIds(mask, static_cast<TokenId>(mask.size() * 64)), std::vector<TokenId>{end});
}

TEST(JsonConstraintTest, NoTokenFitsIsAnError) {
  std::unique_ptr<Tokenizer> tokenizer = SyntheticTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  std::unique_ptr<TokenIndex> index = TokenIndex::Build(*tokenizer);
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"type": "null"})");
  ASSERT_TRUE(g.ok()) << g.status();
  std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*g, index.get(), /*end_ids=*/{});
  std::vector<uint64_t> mask(index->id_limit() / 64 + 1);
  ASSERT_TRUE(c->Accept(*tokenizer->TokenToId("null")).ok());

  EXPECT_THAT(c->Allowed(absl::MakeSpan(mask)), StatusIs(absl::StatusCode::kInternal));
}

TEST(JsonConstraintTest, RandomWalksOnTheQwen3Vocabulary) {
  const std::string path = testing::Qwen3ModelDir() + "/tokenizer.json";
  CAIRN_REQUIRE_DOWNLOADED(path);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromFile(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::unique_ptr<TokenIndex> index = TokenIndex::Build(**tokenizer);
  const TokenId end = *(*tokenizer)->TokenToId("<|im_end|>");
  ASSERT_TRUE((*tokenizer)->IsSpecial(end));
  for (const char* schema :
       {kSchemas[0], kSchemas[1], kSchemas[5], kPatternSchemas[0], kPatternSchemas[2]}) {
    SCOPED_TRACE(schema);
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
        *schema == 0 ? JsonGrammar::AnyObject() : JsonGrammar::FromSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status();
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(*g, index.get(), {end});
    const auto* trie = static_cast<const TrieTokenIndex*>(index.get());
    json::ByteMatcher m(Compiled(*g));
    std::vector<uint64_t> mask(index->id_limit() / 64 + 1);
    std::mt19937 rng(99);
    std::string text;
    for (int step = 0; step < 40; ++step) {
      ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok()) << text;
      if (step % 5 == 0) {
        for (TokenId id = 0; id < index->id_limit(); ++id) {
          json::ByteMatcher next = m;
          const std::string_view bytes = trie->bytes(id);
          const bool fits = id == end ? m.Complete() : !bytes.empty() && next.AdvanceAll(bytes);
          ASSERT_EQ(TokenAllowed(mask, id), fits) << "token " << id << " after " << text;
        }
      }
      const std::vector<TokenId> allowed = AllowedIds(mask, index->id_limit());
      ASSERT_FALSE(allowed.empty());
      const TokenId pick =
          allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (pick == end) break;
      ASSERT_TRUE(c->Accept(pick).ok());
      ASSERT_TRUE(m.AdvanceAll(trie->bytes(pick)));
      text += trie->bytes(pick);
    }
  }
}

}  // namespace
}  // namespace cairn::infer::text
