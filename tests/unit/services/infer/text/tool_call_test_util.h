#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_TOOL_CALL_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_TOOL_CALL_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/tokenizer.h"
#include "tests/unit/services/infer/text/text_test_data.h"

// Helpers of the tool-call grammar tests (tool_call_grammar_test.cc, its XML form in
// tool_call_grammar_xml_test.cc).
namespace cairn::infer::text::testing {

// An OpenAI function tool.
inline nlohmann::ordered_json Tool(const std::string& name, nlohmann::ordered_json parameters,
                                   bool strict = false) {
  nlohmann::ordered_json fn = {
      {"name", name}, {"description", "a tool"}, {"parameters", std::move(parameters)}};
  if (strict) fn["strict"] = true;
  return nlohmann::ordered_json{{"type", "function"}, {"function", std::move(fn)}};
}

// Whether `grammar` accepts `text` as the start of a text (`prefix`), and whole (`complete`).
struct Reading {
  bool prefix = false;
  bool complete = false;
};
inline Reading Read(const std::shared_ptr<const JsonGrammar>& grammar, const std::string& text) {
  json::ByteMatcher m(static_cast<const json::CompiledGrammar*>(grammar.get()));
  Reading r;
  r.prefix = m.AdvanceAll(text);
  r.complete = r.prefix && m.Complete();
  return r;
}

// The real Qwen3 tokenizer and its index, for feeding a grammar a model's own tokens.
class ToolCallTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = Qwen3ModelDir() + "/tokenizer.json";
    CAIRN_REQUIRE_DOWNLOADED(path);
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromFile(path);
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(*t);
    index_ = TokenIndex::Build(*tokenizer_);
    end_ = *tokenizer_->TokenToId("<|im_end|>");
  }

  static bool TokenAllowedHere(const std::vector<uint64_t>& mask, TokenId id) {
    return (mask[static_cast<size_t>(id) / 64] >> (static_cast<uint32_t>(id) % 64)) & 1;
  }

  // Feeds the tokens of `text` to a constraint of `grammar`, checking each is allowed first,
  // and the end of turn only after a call's end (where another call may follow too).
  void ExpectAllowedThrough(const std::shared_ptr<const JsonGrammar>& grammar,
                            const std::string& text) {
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(grammar, index_.get(), {end_});
    std::vector<uint64_t> mask((static_cast<size_t>(index_->id_limit()) + 63) / 64);
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    std::string so_far;
    for (TokenId id : *ids) {
      ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
      EXPECT_EQ(TokenAllowedHere(mask, end_), absl::EndsWith(so_far, "</tool_call>")) << so_far;
      ASSERT_TRUE(TokenAllowedHere(mask, id))
          << "token \"" << tokenizer_->Decode({id}).value() << "\" after " << so_far;
      so_far += tokenizer_->Decode({id}).value();
      ASSERT_TRUE(c->Accept(id).ok());
    }
    ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
    EXPECT_TRUE(TokenAllowedHere(mask, end_));
    EXPECT_TRUE(c->Accept(end_).ok());
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TokenIndex> index_;
  TokenId end_ = -1;
};

}  // namespace cairn::infer::text::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_TOOL_CALL_TEST_UTIL_H_
