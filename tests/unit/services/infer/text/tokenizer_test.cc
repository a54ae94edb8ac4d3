#include "services/infer/text/tokenizer.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/file_util.h"
#include "services/infer/text/unicode.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::text {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::ElementsAre;

// A tiny byte-level BPE tokenizer.json: every byte, merges "a b" -> "ab", "ab c" -> "abc",
// "Ġ a" -> "Ġa", and two added tokens.
std::string TinyTokenizerJson(const std::string& regex_override = "") {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  int id = 0;
  // bytes_to_unicode order is irrelevant for ids here; assign ids by byte value.
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    static int shifted = 0;
    if (b == 0) shifted = 0;
    uint32_t cp = printable ? b : 256 + shifted++;
    std::string key;
    unicode::AppendUtf8(cp, &key);
    vocab[key] = id++;
  }
  vocab["ab"] = id++;
  vocab["abc"] = id++;
  vocab
      ["\xC4\xA0"
       "a"] = id++;  // "Ġa"
  const std::string regex =
      regex_override.empty() ? "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
                             : regex_override;
  nlohmann::ordered_json j = {
      {"added_tokens",
       {{{"id", 1000}, {"content", "<|end|>"}, {"special", true}},
        {{"id", 1001}, {"content", "<tool>"}, {"special", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", regex}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c", "\xC4\xA0 a"}}}},
  };
  return j.dump();
}

TEST(TokenizerTest, MergesByRankAndSplitsAddedTokens) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson());
  ASSERT_TRUE(t.ok()) << t.status();

  absl::StatusOr<std::vector<TokenId>> ids = (*t)->Encode("abc<|end|> a<tool>");

  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(257, 1000, 258, 1001));
}

TEST(TokenizerTest, SpecialTokensAreTextWhenParsingIsOff) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson());
  ASSERT_TRUE(t.ok()) << t.status();

  absl::StatusOr<std::vector<TokenId>> ids =
      (*t)->Encode("<|end|><tool>", EncodeOptions{.parse_special = false, .literal_spans = {}});

  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->back(), 1001);
  EXPECT_GT(ids->size(), 2u);
  EXPECT_EQ(*(*t)->Decode(*ids), "<|end|><tool>");
}

// Inside a literal span a special token is text, as with parsing off; outside it, and for
// non-special added tokens, nothing changes. The text around it tokenizes as if the whole were
// one piece of text (no split at the span's edges).
TEST(TokenizerTest, SpecialTokensInLiteralSpansAreText) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string text = "<|end|>ab<|end|>c<tool>";
  EncodeOptions literal;
  literal.literal_spans = {{9, 16}, {17, 23}};  // The second <|end|>, then the <tool>.

  absl::StatusOr<std::vector<TokenId>> ids = (*t)->Encode(text, literal);
  absl::StatusOr<std::vector<TokenId>> first = (*t)->Encode("<|end|>");
  absl::StatusOr<std::vector<TokenId>> rest =
      (*t)->Encode("ab<|end|>c", EncodeOptions{.parse_special = false, .literal_spans = {}});

  ASSERT_TRUE(ids.ok() && first.ok() && rest.ok());
  std::vector<TokenId> expected = *first;
  expected.insert(expected.end(), rest->begin(), rest->end());
  expected.push_back(1001);
  EXPECT_EQ(*ids, expected);
  EXPECT_EQ(*(*t)->Decode(*ids), text);
}

// As tokenizers' encode_special_tokens: the added tokens are still matched leftmost-longest, and a
// special match is then taken as text, its whole span, so no added token inside it is matched.
TEST(TokenizerTest, UnparsedSpecialTokenHidesTheAddedTokensInsideIt) {
  nlohmann::json j = nlohmann::json::parse(TinyTokenizerJson());
  j["added_tokens"].push_back({{"id", 1002}, {"content", "[<tool>]"}, {"special", true}});
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status();

  absl::StatusOr<std::vector<TokenId>> ids =
      (*t)->Encode("[<tool>]<tool>", EncodeOptions{.parse_special = false, .literal_spans = {}});

  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ::testing::Not(::testing::Contains(1002)));
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 1001), 1);
  EXPECT_EQ(ids->back(), 1001);
  EXPECT_EQ(*(*t)->Decode(*ids), "[<tool>]<tool>");
}

TEST(TokenizerTest, DecodeSkipsOnlySpecialTokens) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson());
  ASSERT_TRUE(t.ok()) << t.status();

  absl::StatusOr<std::string> text = (*t)->Decode({257, 1000, 1001}, /*skip_special=*/true);

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "abc<tool>");
}

// tokenizers builds its merge table by inserting every entry in order (a hash map collected from
// the list), so a merge listed twice has the rank of its last occurrence.
TEST(TokenizerTest, RepeatedMergeTakesTheRankOfItsLastOccurrence) {
  nlohmann::json j = nlohmann::json::parse(TinyTokenizerJson());
  j["model"]["vocab"]["bc"] = 259;
  j["model"]["merges"] = {"a b", "b c", "ab c", "\xC4\xA0 a", "a b"};
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status();

  absl::StatusOr<std::vector<TokenId>> ids = (*t)->Encode("abc");

  // "b c" (rank 1) merges before "a b" (rank 4, not 0): "a" + "bc".
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre('a', 259));
}

// tokenizer.json comes from the model's folder: a field of the wrong type is an error naming
// it, never an exception (nlohmann's value() throws on one).
TEST(TokenizerTest, FieldsOfTheWrongTypeAreErrors) {
  const nlohmann::json base = nlohmann::json::parse(TinyTokenizerJson());
  std::vector<nlohmann::json> bad(8, base);
  bad[0]["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = "no";
  bad[1]["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = 0;
  bad[2]["pre_tokenizer"]["pretokenizers"][0]["invert"] = "false";
  bad[3]["pre_tokenizer"]["pretokenizers"][0]["type"] = 5;
  bad[4]["model"]["byte_fallback"] = "yes";
  bad[5]["model"]["continuing_subword_prefix"] = 1;
  bad[6]["added_tokens"][0]["special"] = "true";
  bad[7]["added_tokens"][1]["lstrip"] = 1;

  for (const nlohmann::json& j : bad) {
    EXPECT_THAT(Tokenizer::FromJson(j.dump()).status(),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << j.dump().substr(0, 200);
  }
  EXPECT_TRUE(Tokenizer::FromJson(base.dump()).ok());
}

// What a hostile or damaged tokenizer.json could make the loader do is bounded: nesting deep
// enough to overflow the stack of nlohmann's recursive copy and dump, ids that would size the
// id table at gigabytes, and error messages that would quote megabytes.
TEST(TokenizerTest, HostileFilesAreErrorsNotCrashes) {
  const nlohmann::json base = nlohmann::json::parse(TinyTokenizerJson());
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  std::string text = base.dump();
  std::string deep_pre = text;
  deep_pre.replace(deep_pre.find("\"pre_tokenizer\":") + 16, 0, deep + ",\"x\":");
  // The nesting is refused before parsing, wherever it is.
  const std::string deep_added = "{\"added_tokens\":[" + deep + "]," + text.substr(1);
  for (const std::string& bad : {deep_pre, deep_added}) {
    EXPECT_THAT(Tokenizer::FromJson(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  }

  nlohmann::json huge = base;
  huge["added_tokens"][0]["id"] = int64_t{1} << 30;
  EXPECT_THAT(Tokenizer::FromJson(huge.dump()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  nlohmann::json sparse = base;  // 261 tokens; an id of 100,000 would leave the table holes.
  sparse["added_tokens"][1]["id"] = 100000;
  const absl::Status sparse_status = Tokenizer::FromJson(sparse.dump()).status();
  EXPECT_THAT(sparse_status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sparse_status.message(), ::testing::HasSubstr("dense"));
  nlohmann::json dense = base;  // Within the slack: loads.
  dense["added_tokens"][1]["id"] = 1500;
  EXPECT_TRUE(Tokenizer::FromJson(dense.dump()).ok());

  nlohmann::json long_value = base;
  long_value["decoder"] = {{"type", std::string(1 << 20, 'x')}};
  const absl::Status status = Tokenizer::FromJson(long_value.dump()).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_LT(status.message().size(), 400u);
}

TEST(TokenizerTest, UnknownIdIsAnError) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson());
  ASSERT_TRUE(t.ok()) << t.status();

  EXPECT_THAT((*t)->Decode({999999}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*t)->Decode({-1}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenizerTest, InvalidUtf8InputIsAnError) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson());
  ASSERT_TRUE(t.ok()) << t.status();

  EXPECT_THAT((*t)->Encode("ab\xFF").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenizerTest, UnsupportedRegexIsRejectedAtLoad) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(TinyTokenizerJson("\\w+"));

  EXPECT_THAT(t.status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenizerTest, MalformedJsonIsRejected) {
  EXPECT_THAT(Tokenizer::FromJson("{not json").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Tokenizer::FromJson("{}").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Utf8LossyTest, ReplacesEachMaximalInvalidSubsequence) {
  // A truncated 3-byte sequence is one U+FFFD; a lone continuation byte is another.
  EXPECT_EQ(Utf8Lossy("a\xE2\x82"
                      "b\x80"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
}

// The real Qwen3 tokenizer, loaded once for the suite.
class Qwen3TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::Qwen3ModelDir() + "/tokenizer.json";
    if (!std::filesystem::exists(path)) return;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromFile(path);
    if (t.ok()) tokenizer_ = std::move(*t).release();
    load_status_ = new absl::Status(t.status());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
    delete load_status_;
    load_status_ = nullptr;
  }
  void SetUp() override {
    CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer.json");
    ASSERT_NE(tokenizer_, nullptr) << *load_status_;
  }

  static Tokenizer* tokenizer_;
  static absl::Status* load_status_;
};
Tokenizer* Qwen3TokenizerTest::tokenizer_ = nullptr;
absl::Status* Qwen3TokenizerTest::load_status_ = nullptr;

TEST_F(Qwen3TokenizerTest, IdsEqualTheReferenceOnTheCorpus) {
  absl::StatusOr<std::string> data =
      ReadFileToString(testing::TextDataPath("tokenizer_qwen3_reference.json"));
  ASSERT_TRUE(data.ok()) << data.status();
  const nlohmann::json ref = nlohmann::json::parse(*data, nullptr, false);
  ASSERT_FALSE(ref.is_discarded());
  ASSERT_GE(ref["cases"].size(), 200u);

  int mismatches = 0;
  for (const nlohmann::json& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    const std::vector<TokenId> want = c["ids"].get<std::vector<TokenId>>();
    if (*ids != want && ++mismatches <= 10) {
      ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump()
                    << "\n got:  " << nlohmann::json(*ids).dump()
                    << "\n want: " << nlohmann::json(want).dump();
    }
    // decode(encode(s)) is the reference's decoding, which is NFC(s).
    absl::StatusOr<std::string> decoded = tokenizer_->Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>());
    EXPECT_EQ(*decoded, unicode::Nfc(text));
  }
  EXPECT_EQ(mismatches, 0);
}

// decode(encode(s)) == NFC(s) for random mixtures of scripts, marks, digits, whitespace, emoji
// and tag fragments (a fixed seed keeps failures reproducible).
TEST_F(Qwen3TokenizerTest, RandomStringsRoundTrip) {
  const std::vector<std::string> pool = {"a",
                                         "Z",
                                         "7",
                                         " ",
                                         "  ",
                                         "\t",
                                         "\n",
                                         "\r\n",
                                         "'s",
                                         "'LL",
                                         "!",
                                         "<",
                                         "<|im_end|>",
                                         "<think>",
                                         "</tool_call>",
                                         "<|im_sta",
                                         "\xC3\xA9",
                                         "e\xCC\x81",
                                         "\xCC\x81",
                                         "\xE4\xB8\xAD",
                                         "\xED\x95\x9C",
                                         "\xE1\x84\x92",
                                         "\xE1\x85\xA1",
                                         "\xF0\x9F\x98\x80",
                                         "\xE2\x80\x8D",
                                         "\xC2\xA0",
                                         "\xE3\x80\x80",
                                         "\xD9\xA1",
                                         "\xC2\xBD",
                                         "\xE2\x84\xAB",
                                         "\xE0\xA4\x95",
                                         "\xE0\xA5\x8D",
                                         "{\"k\": [1, 2]}",
                                         "int x = 0;"};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    const int parts = static_cast<int>(next() % 40);
    for (int k = 0; k < parts; ++k) text += pool[next() % pool.size()];

    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    absl::StatusOr<std::string> decoded = tokenizer_->Decode(*ids);

    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(*decoded, unicode::Nfc(text)) << nlohmann::json(text).dump();
  }
}

// Encode is thread-safe: threads sharing the word cache get the single-threaded results.
TEST_F(Qwen3TokenizerTest, ConcurrentEncodesAgree) {
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    texts.push_back("word" + std::to_string(i % 7) + " \xE4\xB8\xAD\xE6\x96\x87 x" +
                    std::string(static_cast<size_t>(i), 'a'));
  }
  std::vector<std::vector<TokenId>> want;
  for (const std::string& t : texts) want.push_back(*tokenizer_->Encode(t));
  TokenizerOptions small_cache;
  small_cache.cache_max_words = 8;  // Forces clears while other threads read.
  absl::StatusOr<std::unique_ptr<Tokenizer>> shared =
      Tokenizer::FromFile(testing::Qwen3ModelDir() + "/tokenizer.json", small_cache);
  ASSERT_TRUE(shared.ok()) << shared.status();
  std::vector<int> mismatches(4, 0);

  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          absl::StatusOr<std::vector<TokenId>> ids =
              (*shared)->Encode(texts[(i + w) % texts.size()]);
          if (!ids.ok() || *ids != want[(i + w) % texts.size()]) ++mismatches[w];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_F(Qwen3TokenizerTest, SpecTokenIdsAndChatPrefix) {
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode("<|im_start|>assistant\n<think>\n");

  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(151644, 77091, 198, 151667, 198));
  EXPECT_EQ(tokenizer_->TokenToId("<|im_end|>"), 151645);
  EXPECT_EQ(tokenizer_->TokenToId("<tool_call>"), 151657);
  EXPECT_TRUE(tokenizer_->IsSpecial(151645));
  EXPECT_FALSE(tokenizer_->IsSpecial(151667));
}

TEST_F(Qwen3TokenizerTest, StreamingDecodeHoldsSplitCharacters) {
  // Each emoji is several byte-level tokens; the streamed pieces must stay valid UTF-8 and
  // concatenate to the full text.
  const std::string text =
      "a\xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!";
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  StreamingDecoder decoder(tokenizer_);

  std::string streamed;
  for (TokenId id : *ids) {
    absl::StatusOr<std::string> piece = decoder.Push(id);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_TRUE(unicode::IsValidUtf8(*piece));
    streamed += *piece;
  }
  streamed += decoder.Flush();

  EXPECT_EQ(streamed, text);
}

TEST_F(Qwen3TokenizerTest, StreamingFlushReplacesAnIncompleteCharacter) {
  // The first byte-level token of a 4-byte character alone.
  absl::StatusOr<std::vector<TokenId>> ids =
      tokenizer_->Encode("\xF0\x90\x8D\x88");  // U+10348, two tokens.
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GT(ids->size(), 1u);
  StreamingDecoder decoder(tokenizer_);

  absl::StatusOr<std::string> piece = decoder.Push(ids->front());

  ASSERT_TRUE(piece.ok()) << piece.status();
  EXPECT_EQ(*piece, "");
  EXPECT_EQ(decoder.Flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace cairn::infer::text
