#include "services/infer/text/json_grammar.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::infer::text::json {
namespace {

std::string ShownPath(const std::string& path) { return path.empty() ? "/" : path; }

// Refuses cycles of alternatives and aliases (a $ref to itself, anyOf containing itself):
// a value would be expected without any byte being read.
absl::Status CheckNoEmptyCycles(const std::vector<Node>& nodes) {
  std::vector<uint8_t> color(nodes.size(), 0);  // 0 new, 1 on path, 2 done.
  for (size_t start = 0; start < nodes.size(); ++start) {
    if (color[start] != 0) continue;
    // Iterative DFS over kAlt edges: (node, next alt index).
    std::vector<std::pair<int32_t, size_t>> path{{static_cast<int32_t>(start), 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [n, i] = path.back();
      const Node& node = nodes[n];
      if (node.kind != NodeKind::kAlt || i >= node.alts.size()) {
        color[n] = 2;
        path.pop_back();
        continue;
      }
      const int32_t next = node.alts[i++];
      if (color[next] == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema at ", ShownPath(nodes[next].path),
                         " refers to itself ($ref or anyOf) without consuming input"));
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
  return absl::OkStatus();
}

// Checks the fields of raw strings and markup objects (json_grammar.h) that the matcher relies
// on: texts within their bounds, no trie or members they never have.
absl::Status CheckMarkup(const std::vector<Node>& nodes, const std::vector<TrieNode>& tries) {
  auto bounded = [](const std::string& text, int limit) {
    return !text.empty() && text.size() <= static_cast<size_t>(limit);
  };
  for (const Node& node : nodes) {
    if (node.kind == NodeKind::kString) {
      bool fits = node.forbid.size() <= kMaxForbidTexts &&
                  (!node.raw || (!node.forbid.empty() && node.exclude_trie < 0));
      for (const std::string& text : node.forbid) {
        fits = fits && bounded(text, kMaxForbidBytes) && text.find('\0') == std::string::npos;
      }
      if (!fits) {
        return absl::InvalidArgumentError(
            "a string's forbidden texts are at most 4 of 1 to 63 bytes; a raw string has one at "
            "least and no exclusions");
      }
    }
    if (node.kind == NodeKind::kObject && node.markup) {
      const bool extra_fits =
          node.additional < 0 ||
          (node.props.empty() && bounded(node.key_open, kMaxMarkupText) &&
           bounded(node.key_close, kMaxMarkupText) && node.extra_key >= 0 &&
           static_cast<size_t>(node.extra_key) < nodes.size() &&
           nodes[static_cast<size_t>(node.extra_key)].kind == NodeKind::kString &&
           nodes[static_cast<size_t>(node.extra_key)].raw);
      if (!bounded(node.member_end, kMaxMarkupText) || !bounded(node.close, kMaxMarkupText) ||
          !extra_fits || node.key_trie < 0 || static_cast<size_t>(node.key_trie) >= tries.size() ||
          node.next_required.size() != node.props.size() + 1) {
        return absl::InvalidArgumentError(
            "a markup object needs its texts and key trie; additional members only without "
            "properties, with their key texts and a raw key");
      }
    }
  }
  return absl::OkStatus();
}

bool PatternStartViable(const PatternAutomaton& p, const Node& node) {
  return p.start() >= 0 && p.Viable(p.start(), 0, node.min_length, node.max_length);
}

// Computes min_depth for every node (a fixpoint: values only decrease).
void ComputeMinDepths(std::vector<Node>& nodes, const std::vector<TrieNode>& tries,
                      const std::vector<PatternAutomaton>& patterns) {
  auto add1 = [](int32_t d) { return d >= kUnreachable ? kUnreachable : d + 1; };
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& node : nodes) {
      int32_t d = kUnreachable;
      switch (node.kind) {
        case NodeKind::kAlt:
          for (int32_t a : node.alts) d = std::min(d, nodes[a].min_depth);
          break;
        case NodeKind::kString:
          d = (node.max_length < 0 || node.min_length <= node.max_length) &&
                      (node.pattern < 0 || PatternStartViable(patterns[node.pattern], node))
                  ? 1
                  : kUnreachable;
          break;
        case NodeKind::kNumber:
          d = 1;
          break;
        case NodeKind::kLiteral:
          d = tries[node.trie].children.empty() ? kUnreachable : 1;
          break;
        case NodeKind::kObject: {
          int32_t worst = 0;
          for (const Property& p : node.props) {
            if (p.required) worst = std::max(worst, nodes[p.value].min_depth);
          }
          d = add1(worst);
          break;
        }
        case NodeKind::kArray: {
          int32_t worst = 0;
          if (node.max_items >= 0 && node.min_items > node.max_items) worst = kUnreachable;
          for (int32_t i = 0; i < node.min_items && worst < kUnreachable; ++i) {
            const int32_t item = static_cast<size_t>(i) < node.prefix.size()
                                     ? node.prefix[static_cast<size_t>(i)]
                                     : node.items;
            worst = item < 0 ? kUnreachable : std::max(worst, nodes[item].min_depth);
          }
          d = add1(worst);
          break;
        }
        case NodeKind::kSeq: {
          // Every choice must stay completable: the deepest of a chosen value's nodes counts.
          int32_t worst = 0;
          for (const SeqItem& item : node.seq) {
            if (item.kind == SeqItem::Kind::kValue) {
              worst = std::max(worst, nodes[item.value].min_depth);
            }
            for (int32_t v : item.values) worst = std::max(worst, nodes[v].min_depth);
          }
          d = add1(worst);
          break;
        }
      }
      if (d < node.min_depth) {
        node.min_depth = d;
        changed = true;
      }
    }
  }
}

// Returns the path of a part that makes `n` match nothing (for the error message).
std::string Blame(const std::vector<Node>& nodes, int32_t n) {
  absl::flat_hash_set<int32_t> seen;
  while (seen.insert(n).second) {
    const Node& node = nodes[n];
    int32_t next = -1;
    if (node.kind == NodeKind::kAlt && node.alts.size() == 1) next = node.alts[0];
    if (node.kind == NodeKind::kObject) {
      for (const Property& p : node.props) {
        if (p.required && nodes[p.value].min_depth > kMaxValueNesting) {
          next = p.value;
          break;
        }
      }
    }
    if (node.kind == NodeKind::kArray) {
      for (int32_t i = 0; i < node.min_items && static_cast<size_t>(i) < node.prefix.size(); ++i) {
        if (nodes[node.prefix[i]].min_depth > kMaxValueNesting) {
          next = node.prefix[i];
          break;
        }
      }
    }
    if (next < 0) break;
    n = next;
  }
  return ShownPath(nodes[n].path);
}

}  // namespace

absl::Status AnalyzeGrammar(std::vector<Node>& nodes, const std::vector<TrieNode>& tries,
                            const std::vector<PatternAutomaton>& patterns, int32_t root) {
  RETURN_IF_ERROR(CheckMarkup(nodes, tries));
  RETURN_IF_ERROR(CheckNoEmptyCycles(nodes));
  ComputeMinDepths(nodes, tries, patterns);
  if (nodes[static_cast<size_t>(root)].min_depth > kMaxValueNesting) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schema accepts no value: the schema at ", Blame(nodes, root),
        " matches nothing (false, an empty enum, contradictory bounds, a pattern no string of "
        "its lengths matches) or only values nested "
        "deeper than ",
        kMaxValueNesting));
  }
  return absl::OkStatus();
}

int32_t AddTrie(std::vector<TrieNode>& tries, const std::vector<std::string>& literals,
                bool track_below) {
  const int32_t root = static_cast<int32_t>(tries.size());
  tries.emplace_back();
  for (size_t i = 0; i < literals.size(); ++i) {
    int32_t t = root;
    if (track_below) tries[t].below.push_back(static_cast<int32_t>(i));
    for (char c : literals[i]) {
      const uint8_t b = static_cast<uint8_t>(c);
      auto& kids = tries[t].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
      if (it == kids.end() || it->first != b) {
        const int32_t child = static_cast<int32_t>(tries.size());
        it = kids.insert(it, {b, child});
        tries.emplace_back();  // Invalidates `kids`; not used below.
        t = child;
      } else {
        t = it->second;
      }
      if (track_below) tries[t].below.push_back(static_cast<int32_t>(i));
    }
    if (tries[t].terminal < 0) tries[t].terminal = static_cast<int32_t>(i);
  }
  return root;
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Extended(
    const CompiledGrammar& inner, Extension extend) {
  std::vector<Node> nodes = inner.nodes_;
  std::vector<TrieNode> tries = inner.tries_;
  RETURN_IF_ERROR(extend(nodes, tries));
  for (Node& node : nodes) node.min_depth = kUnreachable;
  RETURN_IF_ERROR(AnalyzeGrammar(nodes, tries, inner.patterns_, inner.root_));
  return std::make_shared<const CompiledGrammar>(std::move(nodes), std::move(tries),
                                                 inner.patterns_, inner.root_);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Framed(
    const CompiledGrammar& inner, std::vector<SeqItem> items, std::string again) {
  using Kind = SeqItem::Kind;
  if (items.empty() || items.size() > static_cast<size_t>(kMaxSeqItems) ||
      items.back().kind != Kind::kText) {
    return absl::InvalidArgumentError("a framed grammar's items must end in text");
  }
  std::vector<Node> nodes = inner.nodes_;
  std::vector<TrieNode> tries = inner.tries_;
  const int32_t n = static_cast<int32_t>(nodes.size());
  for (size_t i = 0; i < items.size(); ++i) {
    SeqItem& item = items[i];
    switch (item.kind) {
      case Kind::kText:
        if (item.text.empty())
          return absl::InvalidArgumentError("a framed grammar's text is empty");
        break;
      case Kind::kValue:
        if (item.value < 0 || item.value >= n) {
          return absl::InvalidArgumentError("a framed grammar's value is not a node");
        }
        break;
      case Kind::kChoice:
        if (item.texts.empty()) return absl::InvalidArgumentError("a framed choice has no texts");
        for (const std::string& t : item.texts) {
          if (t.empty()) return absl::InvalidArgumentError("a framed choice's text is empty");
        }
        item.trie = AddTrie(tries, item.texts, false);
        break;
      case Kind::kChosenValue: {
        if (i == 0 || items[i - 1].kind != Kind::kChoice ||
            item.values.size() != items[i - 1].texts.size()) {
          return absl::InvalidArgumentError(
              "a framed chosen value must follow a choice, with a value for each text");
        }
        for (int32_t v : item.values) {
          if (v < 0 || v >= n) return absl::InvalidArgumentError("a framed value is not a node");
        }
        break;
      }
    }
  }
  Node seq;
  seq.kind = NodeKind::kSeq;
  seq.seq = std::move(items);
  seq.seq_again = std::move(again);
  nodes.push_back(std::move(seq));
  const int32_t root = static_cast<int32_t>(nodes.size() - 1);
  for (Node& node : nodes) node.min_depth = kUnreachable;
  RETURN_IF_ERROR(AnalyzeGrammar(nodes, tries, inner.patterns_, root));
  return std::make_shared<const CompiledGrammar>(std::move(nodes), std::move(tries),
                                                 inner.patterns_, root);
}

}  // namespace cairn::infer::text::json
