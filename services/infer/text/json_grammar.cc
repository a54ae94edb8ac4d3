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

// Computes min_depth for every node (a fixpoint: values only decrease).
void ComputeMinDepths(std::vector<Node>& nodes, const std::vector<TrieNode>& tries) {
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
          d = (node.max_length < 0 || node.min_length <= node.max_length) ? 1 : kUnreachable;
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
                            int32_t root) {
  RETURN_IF_ERROR(CheckNoEmptyCycles(nodes));
  ComputeMinDepths(nodes, tries);
  if (nodes[static_cast<size_t>(root)].min_depth > kMaxValueNesting) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schema accepts no value: the schema at ", Blame(nodes, root),
        " matches nothing (false, an empty enum, contradictory bounds) or only values nested "
        "deeper than ",
        kMaxValueNesting));
  }
  return absl::OkStatus();
}

}  // namespace cairn::infer::text::json
