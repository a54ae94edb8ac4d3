#ifndef CAIRN_SERVICES_INFER_TEXT_TOKEN_INDEX_H_
#define CAIRN_SERVICES_INFER_TEXT_TOKEN_INDEX_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/concurrency/mutex.h"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer::text {

// The ids whose bytes, fed to a JSON string's content from one StrPhase (with or without
// escapes allowed), never close the string (`inside`, with the code points each starts, for
// maxLength) or close it after valid content (`leaving`: the rest of the token then depends on what
// surrounds the string). Every other id is refused in that phase.
struct StringTokenClass {
  std::vector<uint64_t> inside_mask;  // Bit per id, as TokenConstraint::Allowed lays it out.
  std::vector<TokenId> inside_ids;
  std::vector<uint16_t> inside_chars;  // Characters started, per inside_ids entry (saturated).
  std::vector<TokenId> leaving_ids;
};

// The ids whose bytes, fed to raw text (json::Node::raw without lengths or pattern) from one
// UTF-8 phase and forbidden-text progress, stay in it (`inside_mask`), and those that may leave
// it: a prefix of them stays in it, at a character boundary, and the next byte is the text's
// exit byte (`leaving_ids`: whether the rest fits depends on what surrounds the text). Every
// other id is refused there.
struct RawTokenClass {
  std::vector<uint64_t> inside_mask;  // Bit per id, as TokenConstraint::Allowed lays it out.
  std::vector<TokenId> leaving_ids;
};

// The tokens that stay inside a JSON string read from its body (between characters), as
// sequences of classes of code points (a partition of them, given by the start of each class):
// a trie whose node at depth d holds the tokens of d code points that end between characters.
// Those that end inside a character (a UTF-8 sequence or an escape cut short) are listed apart.
// For strings with patterns (json_pattern_mask.h): tokens of one sequence behave alike from
// every state of an automaton that tells no two code points of a class apart.
struct CodePointClassTrie {
  struct Node {
    std::vector<std::pair<int32_t, int32_t>> children;  // (class, node).
    std::vector<TokenId> ids;
  };
  std::vector<uint32_t> starts;  // Class k: [starts[k], starts[k + 1]); 0 first, 0x110000 last.
  std::vector<Node> nodes;       // Node 0: the empty sequence.
  std::vector<TokenId> partial_ids;

  int32_t count() const { return static_cast<int32_t>(starts.size()) - 1; }
};

// TokenIndex over a byte trie of the non-special tokens: a mask is one depth-first walk that
// prunes a subtree as soon as its prefix is refused. Ids with no bytes and special tokens are
// in no node.
//
// Thread-safe once built (the string classes are built with it; StringClass reads them under a
// lock; class tries, raw-text classes and forbidden-text hits are built outside it and kept
// under it).
class TrieTokenIndex : public TokenIndex {
 public:
  // A trie node: its children are nodes [first_child, first_child + child_count), sorted by
  // byte; the ids whose bytes end here are ids_[first_id, first_id + id_count).
  struct TrieNode {
    int32_t first_child = 0;
    int32_t first_id = 0;
    uint16_t child_count = 0;
    uint8_t byte = 0;
    uint8_t pad = 0;
    int32_t id_count = 0;
  };

  explicit TrieTokenIndex(const Tokenizer& tokenizer);

  int32_t id_limit() const override { return id_limit_; }
  // Words in a mask covering every id.
  size_t mask_words() const { return (static_cast<size_t>(id_limit_) + 63) / 64; }

  const TrieNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  absl::Span<const TokenId> ids_at(const TrieNode& n) const {
    return absl::MakeConstSpan(ids_).subspan(static_cast<size_t>(n.first_id),
                                             static_cast<size_t>(n.id_count));
  }
  // The raw bytes of `id` (empty for special tokens, unused ids and ids out of range).
  std::string_view bytes(TokenId id) const;
  bool special(TokenId id) const {
    return id >= 0 && id < id_limit_ && special_[static_cast<size_t>(id)] != 0;
  }
  // The class of `phase`. The reference lives as long as this index.
  const StringTokenClass& StringClass(json::StrPhase phase, bool allow_escapes) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The raw-text class of `phase` and forbidden-text state `progress`, for text that may end
  // before `exit` (json::Node::forbid, raw_exit), built the first time it is asked for
  // (a few ms for Qwen3) and kept as long as this index: the grammars that ask for them use a
  // few fixed texts (a tool call's XML markup), about 20 KB each.
  const RawTokenClass& RawClass(json::StrPhase phase, uint8_t progress,
                                const std::vector<std::string>& forbid, char exit) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The ids whose bytes, read from forbidden-text state `progress` (json::ForbidStep),
  // complete a text of `forbid` (a few: the rest of the vocabulary leaves the texts alone), kept
  // like RawClass.
  const std::vector<TokenId>& ForbidHits(const std::vector<std::string>& forbid,
                                         uint8_t progress) const ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the class trie of the partition `starts` (ascending, 0 first, 0x110000 last),
  // built the first time (about 10 ms for Qwen3) and kept, for the kClassTries partitions asked
  // for last, across requests: a schema sent again, or a format, finds it built.
  std::shared_ptr<const CodePointClassTrie> ClassTrie(const std::vector<uint32_t>& starts) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the class trie of `starts` if one is kept, else nullptr.
  std::shared_ptr<const CodePointClassTrie> FindClassTrie(const std::vector<uint32_t>& starts) const
      ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr size_t kClassTries = 8;  // About 1 MB each for Qwen3.

 private:
  std::unique_ptr<CodePointClassTrie> BuildClassTrie(const std::vector<uint32_t>& starts) const;

  std::unique_ptr<StringTokenClass> BuildStringClass(json::StrPhase phase,
                                                     bool allow_escapes) const;

  int32_t id_limit_ = 0;
  std::vector<char> bytes_;       // Every id's bytes, concatenated.
  std::vector<uint32_t> offset_;  // Id i's bytes are [offset_[i], offset_[i + 1]).
  std::vector<uint8_t> special_;
  std::vector<TrieNode> nodes_;  // Node 0 is the root (no bytes).
  std::vector<TokenId> ids_;

  mutable Mutex mu_;
  // By phase, escapes allowed first, then refused.
  mutable std::array<std::unique_ptr<StringTokenClass>, 2 * json::kStrPhaseCount> classes_
      ABSL_GUARDED_BY(mu_);
  // Oldest first.
  mutable std::deque<std::shared_ptr<const CodePointClassTrie>> class_tries_ ABSL_GUARDED_BY(mu_);
  // By forbidden texts, exit byte, phase and progress (RawClass).
  mutable absl::flat_hash_map<std::string, std::unique_ptr<RawTokenClass>> raw_classes_
      ABSL_GUARDED_BY(mu_);
  // By forbidden texts and progress (ForbidHits).
  mutable absl::flat_hash_map<std::string, std::unique_ptr<std::vector<TokenId>>> forbid_hits_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_TOKEN_INDEX_H_
