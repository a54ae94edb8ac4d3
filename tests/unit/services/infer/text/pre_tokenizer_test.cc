#include "services/infer/text/pre_tokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/file_util.h"
#include "services/infer/text/unicode.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::text {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(PreTokenizerPattern pattern, const std::string& text) {
  std::vector<std::string_view> pieces;
  SplitPreTokens(pattern, text, &pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

TEST(PreTokenizerTest, SplitsContractionsWordsDigitsAndSpaces) {
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen2, "I'm 12  ok!\n\n x"),
              ElementsAre("I", "'m", " ", "1", "2", " ", " ok", "!\n\n", " x"));
}

TEST(PreTokenizerTest, TrailingWhitespaceRunKeepsItsLastCharForTheNextWord) {
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen2, "a   b   "), ElementsAre("a", "  ", " b", "   "));
}

TEST(PreTokenizerTest, NewlinesEndAtTheLastNewlineOfAWhitespaceRun) {
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen2, "x \n \n  y"),
              ElementsAre("x", " \n \n", " ", " y"));
}

TEST(PreTokenizerTest, Qwen35KeepsCombiningMarksInsideWords) {
  // "e" + U+0301 COMBINING ACUTE ACCENT + "x".
  const std::string text =
      "caf"
      "e\xCC\x81"
      "x";

  EXPECT_THAT(Split(PreTokenizerPattern::kQwen35, text), ElementsAre(text));
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen2, text),
              ElementsAre("cafe", "\xCC\x81x"));  // The mark prefixes "x".
}

// \p{L}, \p{N} and \p{M} are those of the reference's regex engine: Oniguruma with Unicode 16.0 in
// tokenizers 0.22 and later (services/infer/text/gen_unicode_tables.py).
TEST(PreTokenizerTest, ClassesFollowTheReferenceRegexEngineUnicodeVersion) {
  // U+31350 CJK UNIFIED IDEOGRAPH (Extension H, Unicode 15.0, Lo) after "a": one word.
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen2, "a\xF0\xB1\x8D\x90"),
              ElementsAre("a\xF0\xB1\x8D\x90"));
  // U+1CCF0, U+1CCF1 OUTLINED DIGIT ZERO, ONE (Unicode 16.0, Nd): one piece per digit.
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen2, "\xF0\x9C\xB3\xB0\xF0\x9C\xB3\xB1"),
              ElementsAre("\xF0\x9C\xB3\xB0", "\xF0\x9C\xB3\xB1"));
  // U+11F00 KAWI SIGN CANDRABINDU (Unicode 15.0, Mn) inside a Qwen3.5 word.
  EXPECT_THAT(Split(PreTokenizerPattern::kQwen35,
                    "a\xF0\x91\xBC\x80"
                    "b"),
              ElementsAre("a\xF0\x91\xBC\x80"
                          "b"));
}

TEST(PreTokenizerTest, RecognisesOnlyTheTwoKnownRegexes) {
  EXPECT_FALSE(PreTokenizerPatternFromRegex("\\s+").ok());
  EXPECT_FALSE(PreTokenizerPatternFromRegex("").ok());
}

// Both patterns against the Unicode-aware `regex` module on the whole tokenizer corpus
// (tests/data/text/pretokenizer_reference.json, made by tools/reference/text_reference.py).
TEST(PreTokenizerTest, PiecesEqualTheRegexEngineOnTheCorpus) {
  absl::StatusOr<std::string> data =
      ReadFileToString(testing::TextDataPath("pretokenizer_reference.json"));
  ASSERT_TRUE(data.ok()) << data.status();
  const nlohmann::json ref = nlohmann::json::parse(*data, nullptr, false);
  ASSERT_FALSE(ref.is_discarded());
  ASSERT_GE(ref["cases"].size(), 200u);

  for (const nlohmann::json& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(Split(PreTokenizerPattern::kQwen2, text), c["qwen2"].get<std::vector<std::string>>())
        << nlohmann::json(text).dump();
    EXPECT_EQ(Split(PreTokenizerPattern::kQwen35, text),
              c["qwen35"].get<std::vector<std::string>>())
        << nlohmann::json(text).dump();
  }
}

// NFC is required: the reference normalises before pre-tokenizing, so a decomposed "é" must be
// encoded as the composed one.
TEST(NfcTest, ComposesReordersAndLeavesNfcTextAlone) {
  EXPECT_EQ(unicode::Nfc("cafe\xCC\x81"), "caf\xC3\xA9");             // e + U+0301 -> é
  EXPECT_EQ(unicode::Nfc("\xE2\x84\xAB"), "\xC3\x85");                // U+212B -> Å
  EXPECT_EQ(unicode::Nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");  // reordered marks
  EXPECT_EQ(unicode::Nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // Hangul
  EXPECT_EQ(unicode::Nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // excluded U+0958
  EXPECT_EQ(unicode::Nfc("plain ascii"), "plain ascii");
}

// NFC is the reference normaliser's (unicode-normalization-alignments 0.1.12, Unicode 9.0): a code
// point assigned later has no decomposition and combining class 0 there, so it neither composes
// nor is reordered.
TEST(NfcTest, FollowsTheReferenceNormaliserUnicodeVersion) {
  // U+11935 + U+11930 (Dives Akuru, Unicode 13.0) compose to U+11938 in later versions.
  EXPECT_EQ(unicode::Nfc("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0"), "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
  // a + U+0316 (class 220) + U+1DFA (class 218 from Unicode 14.0): not reordered.
  EXPECT_EQ(unicode::Nfc("a\xCC\x96\xE1\xB7\xBA"), "a\xCC\x96\xE1\xB7\xBA");
  // Marks of Unicode 9.0 are still reordered: a + U+0301 (230) + U+0316 (220).
  EXPECT_EQ(unicode::Nfc("a\xCC\x81\xCC\x96"), "\xC3\xA1\xCC\x96");
}

TEST(UnicodeTest, ClassesOfSampleCodePoints) {
  EXPECT_TRUE(unicode::ClassOf('a') & unicode::kLetter);
  EXPECT_TRUE(unicode::ClassOf(0x4E2D) & unicode::kLetter);
  EXPECT_TRUE(unicode::ClassOf(0x00BD) & unicode::kNumber);
  EXPECT_TRUE(unicode::ClassOf(0x0301) & unicode::kMark);
  EXPECT_TRUE(unicode::ClassOf(0x3000) & unicode::kSpace);
  EXPECT_EQ(unicode::ClassOf('!') & (unicode::kLetter | unicode::kNumber | unicode::kSpace), 0);
}

// Unicode 16.0, the reference regex engine's version: later code points are unassigned there.
TEST(UnicodeTest, ClassesAreThoseOfUnicode16) {
  EXPECT_TRUE(unicode::ClassOf(0x31350) & unicode::kLetter);   // Unicode 15.0.
  EXPECT_TRUE(unicode::ClassOf(0x1CCF0) & unicode::kNumber);   // Unicode 16.0.
  EXPECT_TRUE(unicode::ClassOf(0x11F00) & unicode::kMark);     // Unicode 15.0.
  EXPECT_EQ(unicode::ClassOf(0x323B0) & unicode::kLetter, 0);  // Unicode 17.0 (Extension J).
}

}  // namespace
}  // namespace cairn::infer::text
