#ifndef CAIRN_SERVICES_INFER_TEXT_PRE_TOKENIZER_H_
#define CAIRN_SERVICES_INFER_TEXT_PRE_TOKENIZER_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::infer::text {

// The pre-tokenizer regexes this tokenizer implements exactly (docs/model.md §6.1). There is no
// Unicode-aware regex engine among our dependencies (std::regex is not Unicode aware), so each
// pattern is a hand-written matcher that reproduces the leftmost-first, backtracking semantics of
// the pattern (Oniguruma, which the reference `tokenizers` library uses).
enum class PreTokenizerPattern {
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,
  // As kQwen2, with [\p{L}\p{M}]+ for letter runs and \p{M} excluded from the punctuation class.
  kQwen35,
};

// Returns the pattern whose regex source is `regex` (as written in tokenizer.json), or
// InvalidArgument naming the unsupported regex.
absl::StatusOr<PreTokenizerPattern> PreTokenizerPatternFromRegex(std::string_view regex);

// Splits `text` (valid UTF-8) into the pieces the pattern matches ("isolated" split behaviour),
// appending them to `pieces` in order. The pieces concatenate to `text`.
void SplitPreTokens(PreTokenizerPattern pattern, std::string_view text,
                    std::vector<std::string_view>* pieces);

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_PRE_TOKENIZER_H_
