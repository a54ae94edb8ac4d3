#ifndef CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_MASK_H_
#define CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_MASK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/token_index.h"

// The tokens allowed inside a string with a pattern (JsonConstraint's masks there).
namespace cairn::infer::text {

// Inside a string with a pattern, from one string frame (automaton state and phase): the tokens
// that stay inside the string whatever its lengths, grouped by the frame they end in and the
// code points they add, so that a mask checks the lengths once per run; and the tokens that may
// close the string, whose rest depends on what surrounds it (a ByteMatcher decides).
struct PatternTokenClass {
  struct Run {
    int32_t aux = 0;  // The frame's aux and phase after the tokens.
    json::StrPhase phase = json::StrPhase::kBody;
    int32_t chars = 0;  // Code points begun.
    size_t begin = 0;   // ids[begin, end).
    size_t end = 0;
  };
  std::vector<Run> runs;
  std::vector<TokenId> ids;
  std::vector<TokenId> leaving_ids;
};

// The PatternTokenClasses of one grammar's strings with patterns, built when first asked for
// and kept (up to kMaxClasses; then they are built again).
//
// How: a class is a walk of the index's byte trie from the frame, stepping only the string
// (json::StringContentStep). A pattern with a counted repeat ({1,64}, .{0,100}) reaches a new
// automaton state with each token, and a broad one (a negated class, an email's local part)
// leaves most of the trie to walk: a walk from a string's body that passes kMaxByteWalkNodes
// nodes is given up for the index's CodePointClassTrie of the pattern's partition (the ranges
// of code points no state of its automaton tells apart), a trie far smaller than the bytes',
// kept by the index across requests.
//
// Thread-compatible (one request's). `grammar` and `index` must outlive this object.
class PatternTokenClasses {
 public:
  static constexpr size_t kMaxClasses = 16;
  static constexpr int64_t kMaxByteWalkNodes = 20000;

  PatternTokenClasses(const json::CompiledGrammar* grammar, const TrieTokenIndex* index);
  ~PatternTokenClasses();

  // Returns the class of string frame `top` (past its opening quote) of `node`, which has a
  // pattern. The reference is valid until the next call.
  const PatternTokenClass& Get(const json::Node& node, const json::Frame& top);

 private:
  class ClassTrie;

  const json::CompiledGrammar* grammar_;
  const TrieTokenIndex* index_;
  // Key: pattern, frame aux and phase.
  absl::flat_hash_map<std::tuple<int32_t, int32_t, uint8_t>, std::unique_ptr<PatternTokenClass>>
      classes_;
  absl::flat_hash_map<int32_t, std::unique_ptr<ClassTrie>> tries_;  // By pattern, once needed.
};

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_MASK_H_
