#include "services/infer/text/json_pattern_mask.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/json_pattern.h"
#include "services/infer/text/token_index.h"

namespace cairn::infer::text {
namespace {

constexpr uint8_t kBodyPhase = static_cast<uint8_t>(json::StrPhase::kBody) + 1;  // Frame::phase.

// Collects the runs of a PatternTokenClass: ids grouped by the frame they end in.
class RunCollector {
 public:
  void Add(const json::Frame& end, absl::Span<const TokenId> ids) {
    if (ids.empty()) return;
    auto [it, added] =
        group_of_.try_emplace(std::make_tuple(end.aux, end.phase, end.count), groups_.size());
    if (added) groups_.push_back({end.aux, end.phase, end.count, {}});
    std::vector<TokenId>& g = groups_[it->second].ids;
    g.insert(g.end(), ids.begin(), ids.end());
  }

  void Finish(PatternTokenClass* c) {
    for (Group& g : groups_) {
      c->runs.push_back({g.aux, static_cast<json::StrPhase>(g.phase - 1), g.chars, c->ids.size(),
                         c->ids.size() + g.ids.size()});
      c->ids.insert(c->ids.end(), g.ids.begin(), g.ids.end());
    }
  }

 private:
  struct Group {
    int32_t aux;
    uint8_t phase;
    int32_t chars;
    std::vector<TokenId> ids;
  };
  std::vector<Group> groups_;
  absl::flat_hash_map<std::tuple<int32_t, uint8_t, int32_t>, size_t> group_of_;
};

// `node` with lengths that are counted and never bind: a walk's frames then count the code
// points each token adds, and only the automaton (and JSON) refuse.
json::Node Unbounded(const json::Node& node) {
  json::Node n = node;
  n.min_length = 0;
  n.max_length = std::numeric_limits<int32_t>::max() / 2;
  return n;
}

// A walk of the index's byte trie from one string frame. Single use.
class ByteWalk {
 public:
  ByteWalk(const json::CompiledGrammar& g, const TrieTokenIndex& index, const json::Node& node,
           int64_t budget)
      : g_(g),
        index_(index),
        automaton_(g.pattern(node.pattern)),
        node_(Unbounded(node)),
        budget_(budget) {
    row_of_.assign(static_cast<size_t>(automaton_.state_count()), -1);
  }

  // Returns false when the walk passed its budget of nodes.
  bool Run(json::Frame top, PatternTokenClass* c) {
    top.count = 0;
    Walk(top, 0);
    if (budget_ < 0) return false;
    runs_.Finish(c);
    c->leaving_ids = std::move(leaving_);
    return true;
  }

 private:
  // The state after ASCII code point `b` from state `s` (-1: refused), from a row built the first
  // time `s` is met: most of a walk is such bytes.
  int32_t AsciiNext(int32_t s, uint8_t b) {
    int32_t& row = row_of_[static_cast<size_t>(s)];
    if (row < 0) {
      row = static_cast<int32_t>(rows_.size() / 128);
      for (uint32_t c = 0; c < 128; ++c) rows_.push_back(automaton_.Next(s, c));
    }
    return rows_[static_cast<size_t>(row) * 128 + b];
  }

  void Walk(const json::Frame& f, int32_t at) {
    const TrieTokenIndex::TrieNode& n = index_.node(at);
    const bool body = f.phase == kBodyPhase;
    for (int32_t k = n.first_child; k < n.first_child + n.child_count && budget_ >= 0; ++k) {
      --budget_;
      const TrieTokenIndex::TrieNode& child = index_.node(k);
      const uint8_t b = child.byte;
      json::Frame next = f;
      json::StrStep::Result r;
      if (body && b >= 0x20 && b < 0x80 && b != '"' && b != '\\') {
        // What StringContentStep does here: one character, to a state that (every state being
        // live, the lengths never binding) is viable.
        const int32_t to = AsciiNext(json::PatternStateOf(f.aux), b);
        r = to < 0 ? json::StrStep::kReject : json::StrStep::kStay;
        next.aux = json::PatternAux(to, 0);
        ++next.count;
      } else {
        r = json::StringContentStep(g_, node_, next, b);
      }
      if (r == json::StrStep::kReject) continue;
      if (r == json::StrStep::kClose) {
        Collect(k);
        continue;
      }
      runs_.Add(next, index_.ids_at(child));
      Walk(next, k);
    }
  }

  // Appends the ids of trie node `at` and of every node below it (tokens that close the string
  // there).
  void Collect(int32_t at) {
    const TrieTokenIndex::TrieNode& n = index_.node(at);
    for (TokenId id : index_.ids_at(n)) leaving_.push_back(id);
    for (int32_t k = n.first_child; k < n.first_child + n.child_count; ++k) Collect(k);
  }

  const json::CompiledGrammar& g_;
  const TrieTokenIndex& index_;
  const json::PatternAutomaton& automaton_;
  const json::Node node_;
  int64_t budget_;
  std::vector<int32_t> row_of_;  // Per automaton state: its row in rows_, or -1.
  std::vector<int32_t> rows_;
  RunCollector runs_;
  std::vector<TokenId> leaving_;
};

}  // namespace

// A pattern's view of the index's class trie of its partition: the next states by class, per
// automaton state, built as states are met.
class PatternTokenClasses::ClassTrie {
 public:
  ClassTrie(const json::PatternAutomaton& automaton, std::shared_ptr<const CodePointClassTrie> trie)
      : automaton_(automaton), trie_(std::move(trie)) {
    row_of_.assign(static_cast<size_t>(automaton.state_count()), -1);
  }

  const CodePointClassTrie& trie() const { return *trie_; }

  // Adds to `runs` the tokens of the trie that stay inside the string from automaton state
  // `state` (between characters).
  void Walk(int32_t state, RunCollector* runs) { Walk(0, state, 0, runs); }

 private:
  int32_t Next(int32_t state, int32_t cls) {
    const size_t classes = static_cast<size_t>(trie_->count());
    int32_t& row = row_of_[static_cast<size_t>(state)];
    if (row < 0) {
      row = static_cast<int32_t>(rows_.size() / classes);
      for (size_t k = 0; k < classes; ++k)
        rows_.push_back(automaton_.Next(state, trie_->starts[k]));
    }
    return rows_[static_cast<size_t>(row) * classes + static_cast<size_t>(cls)];
  }

  void Walk(int32_t node, int32_t state, int32_t depth, RunCollector* runs) {
    for (const auto& [cls, child] : trie_->nodes[static_cast<size_t>(node)].children) {
      const int32_t to = Next(state, cls);
      if (to < 0) continue;
      json::Frame end;
      end.phase = kBodyPhase;
      end.aux = json::PatternAux(to, 0);
      end.count = depth + 1;
      runs->Add(end, trie_->nodes[static_cast<size_t>(child)].ids);
      Walk(child, to, depth + 1, runs);
    }
  }

  const json::PatternAutomaton& automaton_;
  std::shared_ptr<const CodePointClassTrie> trie_;
  std::vector<int32_t> row_of_;  // Per automaton state: its row of next states by class.
  std::vector<int32_t> rows_;
};

// The partition of `a`: the code points between consecutive edge bounds of any of its states.
std::vector<uint32_t> Partition(const json::PatternAutomaton& a) {
  std::vector<uint32_t> starts = {0, 0x110000};
  for (int32_t s = 0; s < a.state_count(); ++s) {
    for (const json::PatternAutomaton::Edge& e : a.edges(s)) {
      starts.push_back(e.lo);
      starts.push_back(e.hi + 1);
    }
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

PatternTokenClasses::PatternTokenClasses(const json::CompiledGrammar* grammar,
                                         const TrieTokenIndex* index)
    : grammar_(grammar), index_(index) {}

PatternTokenClasses::~PatternTokenClasses() = default;

const PatternTokenClass& PatternTokenClasses::Get(const json::Node& node, const json::Frame& top) {
  const auto key = std::make_tuple(node.pattern, top.aux, top.phase);
  if (auto it = classes_.find(key); it != classes_.end()) return *it->second;
  if (classes_.size() >= kMaxClasses) classes_.clear();
  auto c = std::make_unique<PatternTokenClass>();
  const bool body = top.phase == kBodyPhase;
  const json::PatternAutomaton& automaton = grammar_->pattern(node.pattern);
  auto trie = tries_.find(node.pattern);
  if (body && trie == tries_.end()) {
    // The index may hold this partition's trie already (the same schema in an earlier request).
    std::vector<uint32_t> starts = Partition(automaton);
    if (auto kept = index_->FindClassTrie(starts)) {
      trie = tries_.emplace(node.pattern, std::make_unique<ClassTrie>(automaton, kept)).first;
    }
  }
  if (!body || trie == tries_.end()) {
    ByteWalk walk(*grammar_, *index_, node, body ? kMaxByteWalkNodes : INT64_MAX);
    if (walk.Run(top, c.get())) return *classes_.emplace(key, std::move(c)).first->second;
    c = std::make_unique<PatternTokenClass>();
    trie = tries_
               .emplace(node.pattern, std::make_unique<ClassTrie>(
                                          automaton, index_->ClassTrie(Partition(automaton))))
               .first;
  }
  // From the body: the class trie's sequences, the tokens that end inside a character one by
  // one, and the tokens that close a string (the index's).
  RunCollector runs;
  trie->second->Walk(json::PatternStateOf(top.aux), &runs);
  const json::Node unbounded = Unbounded(node);
  for (TokenId id : trie->second->trie().partial_ids) {
    json::Frame f = top;
    f.count = 0;
    bool inside = true;
    for (char b : index_->bytes(id)) {
      if (json::StringContentStep(*grammar_, unbounded, f, static_cast<uint8_t>(b)) !=
          json::StrStep::kStay) {
        inside = false;
        break;
      }
    }
    if (inside) runs.Add(f, absl::MakeConstSpan(&id, 1));
  }
  runs.Finish(c.get());
  // Of the tokens that close a string, those whose content before the quote the pattern
  // accepts (the ByteWalk collects only those too).
  for (TokenId id : index_->StringClass(json::StrPhase::kBody, true).leaving_ids) {
    json::Frame f = top;
    f.count = 0;
    for (char b : index_->bytes(id)) {
      const json::StrStep::Result r =
          json::StringContentStep(*grammar_, unbounded, f, static_cast<uint8_t>(b));
      if (r == json::StrStep::kStay) continue;
      if (r == json::StrStep::kClose) c->leaving_ids.push_back(id);
      break;
    }
  }
  return *classes_.emplace(key, std::move(c)).first->second;
}

}  // namespace cairn::infer::text
