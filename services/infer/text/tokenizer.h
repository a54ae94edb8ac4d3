#ifndef CAIRN_SERVICES_INFER_TEXT_TOKENIZER_H_
#define CAIRN_SERVICES_INFER_TEXT_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/concurrency/mutex.h"
#include "services/infer/text/pre_tokenizer.h"

namespace cairn::infer::text {

using TokenId = int32_t;

struct TokenizerOptions {
  // Words (pre-tokenizer pieces) of at most this many bytes are cached after BPE.
  size_t cache_max_word_bytes = 256;
  // The cache is cleared when it reaches this many words (bounds its memory).
  size_t cache_max_words = 1 << 16;
};

struct EncodeOptions {
  // When false, added tokens marked `special` are not recognised in the text and are encoded as
  // ordinary text (the `split_special_tokens` behaviour); non-special added tokens still are,
  // except inside the span of a special one (matching stays leftmost-longest over all of them).
  bool parse_special = true;
  // Byte ranges [first, second) of the text, ascending and disjoint, in which special tokens
  // are text whatever parse_special says (a chat message's own words: chat_template.h,
  // RenderPrompt): a special token whose match overlaps one is encoded as ordinary text.
  std::vector<std::pair<size_t, size_t>> literal_spans;
  // When > 0, Encode stops once the text is known to make more tokens than this and returns
  // OutOfRange: its work then grows with the bound, not the text (a prompt of megabytes that
  // no context can hold is refused after about that many tokens' work).
  size_t max_tokens = 0;
};

// An added token from tokenizer.json's `added_tokens`.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
};

// A byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json` (docs/model.md §6.1):
// NFC normaliser, Split(regex, isolated) + ByteLevel pre-tokenizer, BPE model with merge ranks,
// added tokens matched (leftmost, longest) before normalisation, ByteLevel decoder.
// Anything else in tokenizer.json (another model type, normaliser, pre-tokenizer regex,
// continuing_subword_prefix, dropout, ...) is an InvalidArgument error at load, never a silent
// approximation.
//
// Thread-safe: Encode and Decode may be called concurrently (the word cache has its own lock).
class Tokenizer {
 public:
  // Parses `tokenizer_json` (the file's text). Errors: InvalidArgument for malformed or
  // unsupported content.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             const TokenizerOptions& options = {});
  // Reads and parses the file at `path`. Errors: NotFound / InvalidArgument.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path,
                                                             const TokenizerOptions& options = {});

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Returns the token ids of `text`. No BOS/EOS is added. Errors: InvalidArgument when `text` is
  // not valid UTF-8; OutOfRange past `options.max_tokens`.
  absl::StatusOr<std::vector<TokenId>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const;

  // Returns the raw bytes of `ids` concatenated (not necessarily valid UTF-8: a character may be
  // split across tokens). Special tokens are dropped when `skip_special`. Errors:
  // InvalidArgument naming an id outside the vocabulary.
  absl::StatusOr<std::string> DecodeBytes(absl::Span<const TokenId> ids,
                                          bool skip_special = false) const;
  // As DecodeBytes, converted to UTF-8 the way the reference does (each maximal invalid
  // subsequence becomes U+FFFD).
  absl::StatusOr<std::string> Decode(absl::Span<const TokenId> ids,
                                     bool skip_special = false) const;

  // Returns the id of the vocabulary entry or added token whose text is `token`.
  std::optional<TokenId> TokenToId(std::string_view token) const;
  // Returns true when `id` is an added token marked special.
  bool IsSpecial(TokenId id) const;
  // Returns one past the largest id (vocabulary and added tokens).
  TokenId id_limit() const { return static_cast<TokenId>(id_to_bytes_.size()); }
  PreTokenizerPattern pattern() const { return pattern_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  struct MergeEntry {
    int32_t rank;
    TokenId merged;
  };

  explicit Tokenizer(const TokenizerOptions& options) : options_(options) {}

  // Appends the tokens of one text segment (no added tokens in it), normalised here; false once
  // `out` would pass `max_tokens` (> 0), with `out` then cut short.
  bool EncodeSegment(std::string_view segment, size_t max_tokens, std::vector<TokenId>* out) const;
  // Appends the BPE tokens of one pre-tokenizer piece.
  void EncodeWord(std::string_view word, std::vector<TokenId>* out) const;
  void BpeMerge(std::string_view word, std::vector<TokenId>* out) const;
  // Returns the longest added token matching at `text[pos]`, special or not, or nullptr.
  const AddedToken* MatchAdded(std::string_view text, size_t pos) const;

  const TokenizerOptions options_;
  PreTokenizerPattern pattern_ = PreTokenizerPattern::kQwen2;
  std::vector<std::string> id_to_bytes_;  // Raw bytes per id ("" for unused ids).
  size_t max_token_bytes_ = 1;            // The longest of id_to_bytes_.
  std::vector<uint8_t> id_is_special_;
  std::vector<bool> id_present_;
  absl::flat_hash_map<std::string, TokenId> bytes_to_id_;
  TokenId byte_ids_[256] = {};                        // Id of each single-byte token.
  absl::flat_hash_map<uint64_t, MergeEntry> merges_;  // Key: left id << 32 | right id.
  std::vector<AddedToken> added_;
  // Added tokens by first byte, longest first (indexes into added_).
  std::vector<int> added_by_first_byte_[256];

  mutable Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<TokenId>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

// Converts `bytes` to UTF-8, replacing each maximal invalid subsequence by U+FFFD (the
// behaviour of Rust's String::from_utf8_lossy, which the reference decoder uses).
std::string Utf8Lossy(std::string_view bytes);

// Turns a stream of token ids into text pieces that are always valid UTF-8: bytes of a character
// split across tokens are held back until the character is complete.
// Thread-compatible.
class StreamingDecoder {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDecoder(const Tokenizer* tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Returns the text that became complete with `id` (possibly empty). Errors: InvalidArgument for
  // an id outside the vocabulary.
  absl::StatusOr<std::string> Push(TokenId id);
  // Returns what is still held back (an incomplete character, as U+FFFD) and resets.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_TOKENIZER_H_
