// tokenizer.json loading, then encoding and decoding with whatever loaded.
// Input: the tokenizer.json text, "\0\0", then text to encode (its bytes also serve as ids).

#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "services/infer/text/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

CAIRN_FUZZ_TARGET(Tokenizer) {
  cairn::fuzz::FuzzInput in(data, size);
  const absl::string_view json = in.Until(absl::string_view("\0\0", 2));
  const absl::string_view text = in.rest();
  cairn::infer::text::TokenizerOptions options;
  options.cache_max_words = 64;  // Exercise the cache reset too.
  absl::StatusOr<std::unique_ptr<cairn::infer::text::Tokenizer>> tokenizer =
      cairn::infer::text::Tokenizer::FromJson(cairn::fuzz::Std(json), options);
  if (!tokenizer.ok()) return 0;
  const cairn::infer::text::Tokenizer& t = **tokenizer;
  for (bool special : {true, false}) {
    cairn::infer::text::EncodeOptions encode;
    encode.parse_special = special;
    absl::StatusOr<std::vector<cairn::infer::text::TokenId>> ids =
        t.Encode(cairn::fuzz::Std(text), encode);
    if (ids.ok()) t.Decode(*ids).IgnoreError();  // Only crashes matter here.
  }
  // The middle third of the text literal (special tokens there are text).
  cairn::infer::text::EncodeOptions literal;
  literal.literal_spans = {{text.size() / 3, 2 * text.size() / 3}};
  absl::StatusOr<std::vector<cairn::infer::text::TokenId>> literal_ids =
      t.Encode(cairn::fuzz::Std(text), literal);
  if (literal_ids.ok()) t.Decode(*literal_ids).IgnoreError();
  // Arbitrary ids, in and out of the vocabulary.
  std::vector<cairn::infer::text::TokenId> ids;
  for (size_t i = 0; i + 2 <= text.size() && ids.size() < 256; i += 2) {
    ids.push_back(static_cast<int16_t>(static_cast<uint8_t>(text[i]) |
                                       (static_cast<uint8_t>(text[i + 1]) << 8)));
  }
  t.Decode(ids, /*skip_special=*/true).IgnoreError();  // Out-of-range ids are errors, not UB.
  t.TokenToId(cairn::fuzz::Std(text)).has_value();
  return 0;
}
