#ifndef CAIRN_SERVICES_INFER_TEXT_JSON_GRAMMAR_H_
#define CAIRN_SERVICES_INFER_TEXT_JSON_GRAMMAR_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_pattern.h"

// The insides of JsonGrammar (json_constraint.h): the graph a schema compiles into
// (json_schema_compile.cc), which ByteMatcher (json_matcher.h) walks one byte at a time.
namespace cairn::infer::text::json {

// Limits on what a schema may ask for (hostile schemas must not cost unbounded time or memory).
inline constexpr size_t kMaxSchemaBytes = size_t{1} << 20;  // Text of one schema.
inline constexpr int kMaxSchemaNesting = 64;    // Nesting of the schema document's JSON.
inline constexpr int kMaxGrammarNodes = 20000;  // Nodes one schema compiles into.
inline constexpr int kMaxMinItems = 1024;       // minItems and prefixItems' length.
inline constexpr int kMaxMinLength = 4096;      // minLength.
inline constexpr int kMaxProperties = 1024;     // properties of one object.
// Patterns and formats (json_pattern.h). A DFA can need exponentially more states than its
// pattern has characters ((a|b)*a(a|b){20}), and counted repeats multiply both automata.
inline constexpr int kMaxPatternRepeat = 1000;     // m and n of a quantifier {m,n}.
inline constexpr int kMaxPatternNesting = 64;      // Groups nested in one pattern.
inline constexpr int kMaxPatternNfaStates = 8192;  // NFA states of one pattern, repeats expanded.
inline constexpr int kMaxPatternClasses = 512;     // Classes its sets divide code points into.
inline constexpr int kMaxPatternStates = 4096;     // DFA states of one string's patterns.
inline constexpr int kMaxPatternStatesPerSchema = 32768;       // DFA states of all of them.
inline constexpr int64_t kMaxPatternStepsPerSchema = 1 << 23;  // NFA states visited building them.
// Entries of a schema's length tables (patterns beside minLength): the sum over its automata of
// DFA states x (largest minLength + 1).
inline constexpr int64_t kMaxPatternLengthTable = 1 << 22;

// Limits on the texts the grammar accepts (so a model cannot loop forever where JSON would let
// it: whitespace, digits, nesting).
inline constexpr int kMaxValueNesting = 48;       // Frames on one matcher stack (value nesting).
inline constexpr int kMaxWhitespaceBlanks = 32;   // Spaces and tabs in one run of whitespace.
inline constexpr int kMaxWhitespaceNewlines = 1;  // Newlines in one run of whitespace.
inline constexpr int kMaxIntegerDigits = 18;      // Before the point: integers fit an int64.
inline constexpr int kMaxFractionDigits = 20;     // Digits after a number's '.'.
// Digits of a number's exponent: with at most 18 integer digits a value stays below 1e118, a
// finite double (parsers such as nlohmann's refuse texts that overflow one, e.g. 1e400).
inline constexpr int kMaxExponentDigits = 2;
inline constexpr int kMaxParallelStacks = 32;  // Alternatives a matcher follows at once.

inline constexpr int32_t kUnreachable = std::numeric_limits<int32_t>::max() / 4;

// A byte trie over a set of literals (enum/const serialisations, quoted property names).
// Node 0 of each trie's range is its root; `terminal` is the literal's index or -1.
struct TrieNode {
  std::vector<std::pair<uint8_t, int32_t>> children;  // Sorted by byte.
  int32_t terminal = -1;
  std::vector<int32_t> below;  // Sorted terminals of this subtree (property tries only).
};

enum class NodeKind : uint8_t { kAlt, kString, kNumber, kLiteral, kObject, kArray, kSeq };

// One item of a kSeq node.
struct SeqItem {
  enum class Kind : uint8_t {
    kText,         // `text`, byte for byte.
    kValue,        // A value of node `value`, after JSON whitespace.
    kChoice,       // One of `texts` (Framed builds their trie into `trie`).
    kChosenValue,  // After JSON whitespace, a value of node `values[i]` for the text i that the
                   // kChoice item before it read.
  };
  Kind kind = Kind::kText;
  std::string text;
  int32_t value = -1;
  std::vector<std::string> texts;
  int32_t trie = -1;
  std::vector<int32_t> values;

  static SeqItem Text(std::string t) {
    SeqItem i;
    i.text = std::move(t);
    return i;
  }
  static SeqItem Value(int32_t node) {
    SeqItem i;
    i.kind = Kind::kValue;
    i.value = node;
    return i;
  }
};

inline constexpr int kMaxSeqItems = 64;  // Items of one kSeq node (its frame's phase is a byte).
// Node::forbid: at most 4 texts of at most 63 bytes (a frame's progress byte: text, bytes).
inline constexpr int kMaxForbidTexts = 4;
inline constexpr int kMaxForbidBytes = 63;
inline constexpr int kMaxMarkupText = 64;  // Bytes of Node::member_end and close (likewise).

struct Property {
  std::string name;
  int32_t value = -1;
  bool required = false;
};

// One grammar node. Fields apply per kind (see the comments); the rest stay at their defaults.
struct Node {
  NodeKind kind = NodeKind::kAlt;
  std::string path;  // JSON pointer of the schema it came from (error messages).
  // kAlt: one value matching any of `alts` (an alias when one, nothing when none).
  std::vector<int32_t> alts;
  // kString: code points in [min_length, max_length] (max -1: unbounded). `exclude_trie`
  // (>= 0): a property-name trie the string's content must not equal; escapes are then refused.
  // `pattern` (>= 0, never with exclude_trie): the PatternAutomaton its decoded content must
  // match (`pattern` and `format`), its table extended to min_length.
  int32_t min_length = 0;
  int32_t max_length = -1;
  int32_t exclude_trie = -1;
  int32_t pattern = -1;
  // kString with `raw`: not a JSON string but text written as it is (a tool call's XML
  // parameter): no quotes and no escapes, any code point but the C0 controls other than tab,
  // newline and carriage return, never containing a text of `forbid` (one at least). Its end
  // is not in it: between characters it may end where the next byte is `raw_exit` (its
  // parent's text goes on from that byte), so its parent reads a text starting with raw_exit
  // after it. Never with exclude_trie.
  bool raw = false;
  char raw_exit = '\n';
  // kString: texts its content never holds as written (a JSON string's escapes as they are;
  // a tool call's markup, where the output parser would end it). At most kMaxForbidTexts of
  // at most kMaxForbidBytes bytes each.
  std::vector<std::string> forbid;
  // kNumber: no fraction or exponent when `integer`; no '-' when `no_minus`, no value 0 when
  // `no_zero` (with no_minus: integers from 1); at most `max_digits` before the point.
  bool integer = false;
  bool no_minus = false;
  bool no_zero = false;
  int32_t max_digits = kMaxIntegerDigits;
  // kLiteral: one of the literals in trie `trie`.
  int32_t trie = -1;
  // kObject: `props` in order (each optional or required), then, when `additional` >= 0, more
  // members whose keys match string node `extra_key` and values node `additional`. `key_trie`
  // holds the quoted names (terminal = index in props); `next_required[i]` is the first
  // required index >= i (props.size() when none).
  std::vector<Property> props;
  int32_t additional = -1;
  int32_t extra_key = -1;
  int32_t key_trie = -1;
  std::vector<int32_t> next_required;
  // kObject with `markup`: not a JSON object but a tool call's XML parameters: no '{', each
  // member its key trie's text (the key's markup included, e.g. `<parameter=NAME>\n`) directly
  // followed by its value and `member_end`, no separators or whitespace, the object ending with
  // `close`. Additional members (`additional`, only where `props` is empty) are `key_open`, a
  // key of raw string node `extra_key`, `key_close`, the value and `member_end`. The texts are
  // not empty (key_open and key_close only with additional members), at most kMaxMarkupText.
  bool markup = false;
  std::string member_end;
  std::string close;
  std::string key_open;
  std::string key_close;
  // kArray: `prefix` items first, then items of node `items` (-1: none); between min_items and
  // max_items (-1: unbounded) in all. Counts saturate at `count_cap`.
  std::vector<int32_t> prefix;
  int32_t items = -1;
  int32_t min_items = 0;
  int32_t max_items = -1;
  int32_t count_cap = 0;
  // kSeq: `seq` in order, not a JSON value but a text around values (a tool call's markup):
  // JSON whitespace before a value and nowhere else. After the last item (text) the node is
  // done, or, when `seq_again` is not empty, reads that text and starts over at the first item.
  std::vector<SeqItem> seq;
  std::string seq_again;
  // Computed: the fewest stack frames a value of this node needs (kUnreachable when no value
  // matches it).
  int32_t min_depth = kUnreachable;
};

// Adds a trie of `literals` (terminal i for literals[i]; the first of equal ones) to `tries`
// and returns its root. With `track_below` each node lists the terminals under it.
int32_t AddTrie(std::vector<TrieNode>& tries, const std::vector<std::string>& literals,
                bool track_below);

// Checks the grammar of `nodes` (rooted at `root`) and fills in each node's min_depth. Errors:
// InvalidArgument for a cycle of references or alternatives that reads no byte, and for a root
// that no value (nested at most kMaxValueNesting deep) matches, naming the part to blame.
absl::Status AnalyzeGrammar(std::vector<Node>& nodes, const std::vector<TrieNode>& tries,
                            const std::vector<PatternAutomaton>& patterns, int32_t root);

// The compiled form of a schema. Immutable once built; thread-safe.
class CompiledGrammar : public JsonGrammar {
 public:
  CompiledGrammar(std::vector<Node> nodes, std::vector<TrieNode> tries,
                  std::vector<PatternAutomaton> patterns, int32_t root)
      : nodes_(std::move(nodes)),
        tries_(std::move(tries)),
        patterns_(std::move(patterns)),
        root_(root) {}

  // `inner` with a kSeq node of `items` and `again` (Node::seq, Node::seq_again) as its new
  // root; value items name nodes of `inner`. InvalidArgument for more than kMaxSeqItems items,
  // a last item that is not text, an empty text or choice, a kChosenValue item that does not
  // follow a kChoice with a value for each text, or a node that is not `inner`'s.
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Framed(const CompiledGrammar& inner,
                                                                       std::vector<SeqItem> items,
                                                                       std::string again = "");
  // `inner` with the nodes and tries that `extend` appends to copies of its own (new nodes are
  // numbered from inner.node_count(), tries from inner.trie_count()), the root unchanged: for
  // nodes that a schema does not compile into (raw strings, markup objects) for Framed to name.
  // Errors: `extend`'s, and AnalyzeGrammar's.
  using Extension = absl::FunctionRef<absl::Status(std::vector<Node>&, std::vector<TrieNode>&)>;
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Extended(
      const CompiledGrammar& inner, Extension extend);

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  const TrieNode& trie(int32_t i) const { return tries_[static_cast<size_t>(i)]; }
  const PatternAutomaton& pattern(int32_t i) const { return patterns_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }
  size_t node_count() const { return nodes_.size(); }
  size_t trie_count() const { return tries_.size(); }

  // Returns the child of trie node `t` on `byte`, or -1.
  int32_t TrieChild(int32_t t, uint8_t byte) const {
    for (const auto& [b, child] : trie(t).children) {
      if (b == byte) return child;
      if (b > byte) break;
    }
    return -1;
  }

 private:
  std::vector<Node> nodes_;
  std::vector<TrieNode> tries_;
  std::vector<PatternAutomaton> patterns_;
  int32_t root_;
};

}  // namespace cairn::infer::text::json

#endif  // CAIRN_SERVICES_INFER_TEXT_JSON_GRAMMAR_H_
