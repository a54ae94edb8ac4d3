#include "services/infer/text/json_pattern.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_pattern_syntax.h"
#include "services/infer/text/unicode.h"
namespace cairn::infer::text::json {
namespace {

using pattern_syntax::Ast;
using pattern_syntax::kMaxCodePoint;
using pattern_syntax::kSurrogateFirst;
using pattern_syntax::kSurrogateLast;
using pattern_syntax::NoLookahead;
using pattern_syntax::Ranges;
using pattern_syntax::Scalars;

// A Thompson NFA: edges that read nothing, one code point of a set, or assert the start or the
// end of the string. Accepts where `final` is reached with the input consumed.
struct NfaEdge {
  enum Kind : uint8_t { kEps, kChar, kBol, kEol };
  Kind kind = kEps;
  int32_t set = -1;  // kChar: index into the compile's sets.
  int32_t to = 0;
};

struct Nfa {
  std::vector<std::vector<NfaEdge>> out;
  int32_t start = 0;
  int32_t final = 0;  // Reads any code point back to itself: what follows a match is free.
};

class NfaBuilder {
 public:
  // `sets` collects the code point sets of every NFA of one compile; must outlive this object.
  explicit NfaBuilder(std::vector<Ranges>* sets) : sets_(sets) {}

  // Returns the NFA of the strings that `a` matches: anywhere (`search`, JSON Schema's pattern)
  // or at the start (a lookahead); either way anything may follow the match.
  absl::StatusOr<Nfa> Build(const Ast& a, bool search) {
    const int32_t any = AddSet({{0, kMaxCodePoint}});
    ASSIGN_OR_RETURN(nfa_.start, New());
    int32_t body = nfa_.start;
    if (search) {
      Edge(nfa_.start, NfaEdge::kChar, nfa_.start, any);
      ASSIGN_OR_RETURN(body, New());
      Edge(nfa_.start, NfaEdge::kEps, body);
    }
    ASSIGN_OR_RETURN(int32_t end, Add(a, body));
    ASSIGN_OR_RETURN(nfa_.final, New());
    Edge(end, NfaEdge::kEps, nfa_.final);
    Edge(nfa_.final, NfaEdge::kChar, nfa_.final, any);
    return std::move(nfa_);
  }

 private:
  absl::StatusOr<int32_t> New() {
    if (nfa_.out.size() >= static_cast<size_t>(kMaxPatternNfaStates)) {
      return absl::InvalidArgumentError(absl::StrCat("it needs more than ", kMaxPatternNfaStates,
                                                     " NFA states (its repeats expanded)"));
    }
    nfa_.out.emplace_back();
    return static_cast<int32_t>(nfa_.out.size() - 1);
  }

  int32_t AddSet(const Ranges& r) {
    sets_->push_back(Scalars(r));
    return static_cast<int32_t>(sets_->size() - 1);
  }

  void Edge(int32_t from, NfaEdge::Kind kind, int32_t to, int32_t set = -1) {
    nfa_.out[static_cast<size_t>(from)].push_back({kind, set, to});
  }

  // Adds the states that read `a` from state `in`; returns the state reached after it. Edges
  // added from `in` keep their meaning when `in` is a loop's state: they continue after it.
  absl::StatusOr<int32_t> Add(const Ast& a, int32_t in) {
    switch (a.kind) {
      case Ast::Kind::kEmpty:
        return in;
      case Ast::Kind::kChars: {
        ASSIGN_OR_RETURN(int32_t out, New());
        Edge(in, NfaEdge::kChar, out, AddSet(a.chars));
        return out;
      }
      case Ast::Kind::kBol:
      case Ast::Kind::kEol: {
        ASSIGN_OR_RETURN(int32_t out, New());
        Edge(in, a.kind == Ast::Kind::kBol ? NfaEdge::kBol : NfaEdge::kEol, out);
        return out;
      }
      case Ast::Kind::kConcat:
        for (const Ast& k : a.kids) {
          ASSIGN_OR_RETURN(in, Add(k, in));
        }
        return in;
      case Ast::Kind::kAlt: {
        ASSIGN_OR_RETURN(int32_t out, New());
        for (const Ast& k : a.kids) {
          ASSIGN_OR_RETURN(int32_t s, New());
          Edge(in, NfaEdge::kEps, s);
          ASSIGN_OR_RETURN(int32_t e, Add(k, s));
          Edge(e, NfaEdge::kEps, out);
        }
        return out;
      }
      case Ast::Kind::kRepeat: {
        const Ast& k = a.kids[0];
        for (int32_t i = 0; i < a.min; ++i) {
          ASSIGN_OR_RETURN(in, Add(k, in));
        }
        if (a.max < 0) {
          ASSIGN_OR_RETURN(int32_t loop, New());
          Edge(in, NfaEdge::kEps, loop);
          ASSIGN_OR_RETURN(int32_t e, Add(k, loop));
          Edge(e, NfaEdge::kEps, loop);
          return loop;
        }
        // The optional copies as x(x(x)?)?: each may skip straight to the end, so that a
        // state's closure does not walk the copies after it (x{0,n} would cost n^2).
        if (a.max == a.min) return in;
        ASSIGN_OR_RETURN(int32_t end, New());
        for (int32_t i = a.min; i < a.max; ++i) {
          ASSIGN_OR_RETURN(int32_t s, New());  // Fresh: only this copy's edges leave it.
          Edge(in, NfaEdge::kEps, s);
          Edge(s, NfaEdge::kEps, end);
          ASSIGN_OR_RETURN(in, Add(k, s));
        }
        Edge(in, NfaEdge::kEps, end);
        return end;
      }
      case Ast::Kind::kLookahead:
        break;  // Taken out before (NoLookahead).
    }
    return absl::InternalError("pattern: a lookahead reached the NFA builder");
  }

  std::vector<Ranges>* sets_;
  Nfa nfa_;
};

// The classes of code points that no set of a compile tells apart: class k is
// [starts[k], starts[k + 1]); surrogates are a class of their own, which no set holds.
struct Classes {
  std::vector<uint32_t> starts;
  std::vector<std::vector<int32_t>> of_set;  // Per set, the classes it holds.

  int32_t count() const { return static_cast<int32_t>(starts.size()) - 1; }
  bool surrogate(int32_t k) const { return starts[static_cast<size_t>(k)] == kSurrogateFirst; }
};

absl::StatusOr<Classes> Partition(const std::vector<Ranges>& sets) {
  Classes c;
  c.starts = {0, kSurrogateFirst, kSurrogateLast + 1, kMaxCodePoint + 1};
  for (const Ranges& r : sets) {
    for (const auto& [lo, hi] : r) {
      c.starts.push_back(lo);
      c.starts.push_back(hi + 1);
    }
  }
  std::sort(c.starts.begin(), c.starts.end());
  c.starts.erase(std::unique(c.starts.begin(), c.starts.end()), c.starts.end());
  if (c.count() > kMaxPatternClasses) {
    return absl::InvalidArgumentError(
        absl::StrCat("its character sets divide code points into "
                     "more than ",
                     kMaxPatternClasses, " classes"));
  }
  auto index = [&](uint32_t cp) {
    return static_cast<int32_t>(std::upper_bound(c.starts.begin(), c.starts.end(), cp) -
                                c.starts.begin() - 1);
  };
  for (const Ranges& r : sets) {
    std::vector<int32_t> ks;
    for (const auto& [lo, hi] : r) {
      for (int32_t k = index(lo); k <= index(hi); ++k) ks.push_back(k);
    }
    c.of_set.push_back(std::move(ks));
  }
  return c;
}

// A DFA over the classes of a Classes, transitions dense: next[s * classes + k] (-1: none).
struct Dfa {
  int32_t classes = 0;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  int32_t start = 0;

  int32_t size() const { return static_cast<int32_t>(accepting.size()); }
  int32_t Next(int32_t s, int32_t k) const {
    return next[static_cast<size_t>(s) * static_cast<size_t>(classes) + static_cast<size_t>(k)];
  }
};

absl::Status TooManyStates() {
  return absl::InvalidArgumentError(absl::StrCat("it needs more than ", kMaxPatternStates,
                                                 " DFA states (or the schema's patterns more than ",
                                                 kMaxPatternStatesPerSchema, " in all)"));
}

absl::Status TooMuchWork() {
  return absl::InvalidArgumentError(absl::StrCat("the schema's patterns take more than ",
                                                 kMaxPatternStepsPerSchema,
                                                 " steps to build into DFAs"));
}

// Subset construction. A DFA state is the set of NFA states the input so far can have led to
// (closed over edges that read nothing), plus whether the input is empty so far: only then are
// ^ edges taken. $ edges are taken only to decide whether a state accepts.
absl::StatusOr<Dfa> Determinize(const Nfa& nfa, const Classes& cls, PatternBudget* budget) {
  Dfa dfa;
  dfa.classes = cls.count();
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;  // Key: the set, -1 first at start.
  std::vector<std::vector<int32_t>> sets;
  std::vector<uint32_t> mark(nfa.out.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;

  // Visits the NFA states reachable from `seeds` over the edges `follow` allows; returns
  // whether `final` is among them, and the states in `*seen` when given. Sets `*bol` when a
  // state visited has a ^ edge.
  bool bol = false;
  auto walk = [&](const std::vector<int32_t>& seeds, auto follow,
                  std::vector<int32_t>* seen) -> absl::StatusOr<bool> {
    ++stamp;
    bool found = false;
    stack.assign(seeds.begin(), seeds.end());
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (mark[static_cast<size_t>(s)] == stamp) continue;
      mark[static_cast<size_t>(s)] = stamp;
      if (--budget->steps < 0) return TooMuchWork();
      found |= s == nfa.final;
      if (seen != nullptr) seen->push_back(s);
      for (const NfaEdge& e : nfa.out[static_cast<size_t>(s)]) {
        bol |= e.kind == NfaEdge::kBol;
        if (follow(e.kind)) stack.push_back(e.to);
      }
    }
    return found;
  };
  auto intern = [&](const std::vector<int32_t>& seeds, bool at_start) -> absl::StatusOr<int32_t> {
    std::vector<int32_t> set;
    bol = false;
    ASSIGN_OR_RETURN(
        bool has_final,
        walk(
            seeds,
            [&](NfaEdge::Kind k) { return k == NfaEdge::kEps || (at_start && k == NfaEdge::kBol); },
            &set));
    // `final` reads anything back to itself and accepts: the set's language is every string.
    if (has_final) {
      set = {nfa.final};
      at_start = false;
    }
    std::sort(set.begin(), set.end());
    // Where no ^ is in reach, the start is the same state as the set reached later.
    if (at_start && !bol) {
      ASSIGN_OR_RETURN(
          bool unused,
          walk(
              set, [](NfaEdge::Kind k) { return k == NfaEdge::kEps || k == NfaEdge::kEol; },
              nullptr));
      static_cast<void>(unused);
      at_start = bol;
    }
    std::vector<int32_t> key = set;
    if (at_start) key.insert(key.begin(), -1);
    if (auto it = ids.find(key); it != ids.end()) return it->second;
    if (sets.size() >= static_cast<size_t>(kMaxPatternStates) || --budget->states < 0) {
      return TooManyStates();
    }
    ASSIGN_OR_RETURN(bool accepts, walk(
                                       set,
                                       [&](NfaEdge::Kind k) {
                                         return k == NfaEdge::kEps || k == NfaEdge::kEol ||
                                                (at_start && k == NfaEdge::kBol);
                                       },
                                       nullptr));
    const int32_t id = static_cast<int32_t>(sets.size());
    ids.emplace(std::move(key), id);
    sets.push_back(std::move(set));
    dfa.accepting.push_back(accepts ? 1 : 0);
    return id;
  };

  ASSIGN_OR_RETURN(dfa.start, intern({nfa.start}, /*at_start=*/true));
  std::vector<std::vector<int32_t>> bucket(static_cast<size_t>(dfa.classes));
  for (size_t d = 0; d < sets.size(); ++d) {
    for (int32_t s : sets[d]) {
      for (const NfaEdge& e : nfa.out[static_cast<size_t>(s)]) {
        if (e.kind != NfaEdge::kChar) continue;
        for (int32_t k : cls.of_set[static_cast<size_t>(e.set)]) {
          bucket[static_cast<size_t>(k)].push_back(e.to);
        }
      }
    }
    dfa.next.resize((d + 1) * static_cast<size_t>(dfa.classes), -1);
    for (int32_t k = 0; k < dfa.classes; ++k) {
      std::vector<int32_t>& b = bucket[static_cast<size_t>(k)];
      if (b.empty()) continue;
      std::sort(b.begin(), b.end());
      b.erase(std::unique(b.begin(), b.end()), b.end());
      ASSIGN_OR_RETURN(int32_t t, intern(b, /*at_start=*/false));
      dfa.next[d * static_cast<size_t>(dfa.classes) + static_cast<size_t>(k)] = t;
      b.clear();
    }
  }
  return dfa;
}

// The product of `a` and `b` (over the same classes): the strings both accept, or with
// `subtract` those `a` accepts and `b` does not.
absl::StatusOr<Dfa> Product(const Dfa& a, const Dfa& b, bool subtract, PatternBudget* budget) {
  Dfa out;
  out.classes = a.classes;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;  // -1 for b: b refused (only with subtract).
  auto intern = [&](int32_t x, int32_t y) -> absl::StatusOr<int32_t> {
    if (auto it = ids.find({x, y}); it != ids.end()) return it->second;
    if (pairs.size() >= static_cast<size_t>(kMaxPatternStates) || --budget->states < 0) {
      return TooManyStates();
    }
    const bool b_accepts = y >= 0 && b.accepting[static_cast<size_t>(y)] != 0;
    out.accepting.push_back(a.accepting[static_cast<size_t>(x)] != 0 && b_accepts != subtract);
    const int32_t id = static_cast<int32_t>(pairs.size());
    ids.emplace(std::make_pair(x, y), id);
    pairs.push_back({x, y});
    return id;
  };
  ASSIGN_OR_RETURN(out.start, intern(a.start, b.start));
  for (size_t d = 0; d < pairs.size(); ++d) {
    const auto [x, y] = pairs[d];
    out.next.resize((d + 1) * static_cast<size_t>(out.classes), -1);
    for (int32_t k = 0; k < out.classes; ++k) {
      const int32_t nx = a.Next(x, k);
      const int32_t ny = y < 0 ? -1 : b.Next(y, k);
      if (nx < 0 || (ny < 0 && !subtract)) continue;
      if (--budget->steps < 0) return TooMuchWork();
      ASSIGN_OR_RETURN(int32_t t, intern(nx, ny));
      out.next[d * static_cast<size_t>(out.classes) + static_cast<size_t>(k)] = t;
    }
  }
  return out;
}

}  // namespace

struct PatternCompiler::Piece {
  Ast main;
  std::vector<Ast> lookaheads;  // Right after the leading ^: the string must (not) start so.
  std::vector<bool> negative;
};

PatternCompiler::PatternCompiler(PatternBudget* budget) : budget_(budget) {}
PatternCompiler::~PatternCompiler() = default;

absl::Status PatternCompiler::Add(std::string_view pattern) {
  std::u32string source;
  for (size_t i = 0; i < pattern.size();) {
    int len = 1;
    source.push_back(unicode::DecodeUtf8(pattern, i, &len));
    i += static_cast<size_t>(len);
  }
  ASSIGN_OR_RETURN(Ast ast, pattern_syntax::ParsePattern(std::move(source)));
  auto piece = std::make_unique<Piece>();
  if (ast.kind == Ast::Kind::kConcat && ast.kids[0].kind == Ast::Kind::kBol) {
    size_t i = 1;
    for (; i < ast.kids.size() && ast.kids[i].kind == Ast::Kind::kLookahead; ++i) {
      RETURN_IF_ERROR(NoLookahead(ast.kids[i].kids[0]));
      piece->lookaheads.push_back(std::move(ast.kids[i].kids[0]));
      piece->negative.push_back(ast.kids[i].negative);
    }
    ast.kids.erase(ast.kids.begin() + 1, ast.kids.begin() + static_cast<std::ptrdiff_t>(i));
  }
  RETURN_IF_ERROR(NoLookahead(ast));
  piece->main = std::move(ast);
  pieces_.push_back(std::move(piece));
  return absl::OkStatus();
}

absl::StatusOr<PatternAutomaton> PatternCompiler::Compile() {
  // Every NFA first, so that one partition of the code points serves all their DFAs.
  std::vector<Ranges> sets;
  std::vector<Nfa> nfas;
  std::vector<bool> subtract;  // Per NFA after the first: its DFA is subtracted, not intersected.
  for (const std::unique_ptr<Piece>& p : pieces_) {
    NfaBuilder main(&sets);
    ASSIGN_OR_RETURN(Nfa n, main.Build(p->main, /*search=*/true));
    nfas.push_back(std::move(n));
    subtract.push_back(false);
    for (size_t i = 0; i < p->lookaheads.size(); ++i) {
      NfaBuilder look(&sets);
      ASSIGN_OR_RETURN(Nfa l, look.Build(p->lookaheads[i], /*search=*/false));
      nfas.push_back(std::move(l));
      subtract.push_back(p->negative[i]);
    }
  }
  ASSIGN_OR_RETURN(Classes cls, Partition(sets));
  Dfa dfa;
  for (size_t i = 0; i < nfas.size(); ++i) {
    ASSIGN_OR_RETURN(Dfa d, Determinize(nfas[i], cls, budget_));
    if (i == 0) {
      dfa = std::move(d);
    } else {
      ASSIGN_OR_RETURN(dfa, Product(dfa, d, subtract[i], budget_));
    }
  }

  // Live states: those from which an accepting one is reachable.
  const int32_t n = dfa.size();
  const int32_t kc = dfa.classes;
  std::vector<std::vector<int32_t>> preds(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t k = 0; k < kc; ++k) {
      if (dfa.Next(s, k) >= 0) preds[static_cast<size_t>(dfa.Next(s, k))].push_back(s);
    }
  }
  std::vector<uint8_t> live(static_cast<size_t>(n), 0);
  std::vector<int32_t> work;
  for (int32_t s = 0; s < n; ++s) {
    if (dfa.accepting[static_cast<size_t>(s)] != 0) {
      live[static_cast<size_t>(s)] = 1;
      work.push_back(s);
    }
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (int32_t p : preds[static_cast<size_t>(s)]) {
      if (live[static_cast<size_t>(p)] == 0) {
        live[static_cast<size_t>(p)] = 1;
        work.push_back(p);
      }
    }
  }
  auto target = [&](int32_t s, int32_t k) {
    const int32_t t = dfa.Next(s, k);
    return t >= 0 && live[static_cast<size_t>(t)] != 0 ? t : -1;
  };

  // Universal states (every string accepted from them): accepting, every scalar value leading
  // to another such state. The greatest such set, by removing states that lead outside it.
  std::vector<uint8_t> universal(static_cast<size_t>(n), 0);
  for (int32_t s = 0; s < n; ++s) {
    bool all = dfa.accepting[static_cast<size_t>(s)] != 0;
    for (int32_t k = 0; k < kc && all; ++k) all = cls.surrogate(k) || target(s, k) >= 0;
    universal[static_cast<size_t>(s)] = all ? 1 : 0;
  }
  for (int32_t s = 0; s < n; ++s) {
    if (universal[static_cast<size_t>(s)] != 0) work.push_back(s);
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (universal[static_cast<size_t>(s)] == 0) continue;
    bool inside = true;
    for (int32_t k = 0; k < kc && inside; ++k) {
      inside = cls.surrogate(k) || universal[static_cast<size_t>(target(s, k))] != 0;
    }
    if (inside) continue;
    universal[static_cast<size_t>(s)] = 0;
    for (int32_t p : preds[static_cast<size_t>(s)]) {
      if (universal[static_cast<size_t>(p)] != 0) work.push_back(p);
    }
  }
  int32_t rep = -1;  // The one universal state kept.
  for (int32_t s = 0; s < n && rep < 0; ++s) {
    if (universal[static_cast<size_t>(s)] != 0) rep = s;
  }
  auto canonical = [&](int32_t s) {
    return s >= 0 && universal[static_cast<size_t>(s)] != 0 ? rep : s;
  };

  // Renumber the live states reachable from the start, breadth first.
  PatternAutomaton a;
  if (live[static_cast<size_t>(dfa.start)] == 0) return a;  // start_ -1: nothing matches.
  std::vector<int32_t> id(static_cast<size_t>(n), -1);
  std::vector<int32_t> order{canonical(dfa.start)};
  id[static_cast<size_t>(order[0])] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    for (int32_t k = 0; k < kc; ++k) {
      const int32_t t = canonical(target(s, k));
      if (t < 0 || cls.surrogate(k) || id[static_cast<size_t>(t)] >= 0) continue;
      id[static_cast<size_t>(t)] = static_cast<int32_t>(order.size());
      order.push_back(t);
    }
  }
  for (const int32_t s : order) {
    const bool uni = s == rep;
    a.flags_.push_back(static_cast<uint8_t>(
        (dfa.accepting[static_cast<size_t>(s)] != 0 ? PatternAutomaton::kAccepting : 0) |
        (uni ? PatternAutomaton::kUniversal : 0)));
    for (int32_t k = 0; k < kc; ++k) {
      const int32_t t = canonical(target(s, k));
      if (t < 0 || cls.surrogate(k)) continue;
      const int32_t to = id[static_cast<size_t>(t)];
      const uint32_t lo = cls.starts[static_cast<size_t>(k)];
      const uint32_t hi = cls.starts[static_cast<size_t>(k) + 1] - 1;
      if (a.edges_.size() > static_cast<size_t>(a.first_edge_.back()) && a.edges_.back().to == to &&
          a.edges_.back().hi + 1 == lo) {
        a.edges_.back().hi = hi;
      } else {
        a.edges_.push_back({lo, hi, to});
      }
    }
    a.first_edge_.push_back(static_cast<int32_t>(a.edges_.size()));
  }

  a.start_ = 0;
  a.ExtendLengthTable(0);
  return a;
}

void PatternAutomaton::ExtendLengthTable(int32_t min_length) {
  // Column 0 by a breadth-first search back from the accepting states; column j from column
  // j - 1 (a path of at least j code points is one step, then at least j - 1).
  const int32_t m = state_count();
  const int32_t cols = min_length + 1;
  if (cols <= columns_) return;
  columns_ = cols;
  shortest_.assign(static_cast<size_t>(m) * static_cast<size_t>(cols), kNever);
  auto at = [&](int32_t s, int32_t j) -> int32_t& {
    return shortest_[static_cast<size_t>(s) * static_cast<size_t>(cols) + static_cast<size_t>(j)];
  };
  std::vector<std::vector<int32_t>> back(static_cast<size_t>(m));
  for (int32_t s = 0; s < m; ++s) {
    for (const Edge& e : edges(s)) back[static_cast<size_t>(e.to)].push_back(s);
  }
  std::vector<int32_t> queue;
  for (int32_t s = 0; s < m; ++s) {
    if (accepting(s)) {
      at(s, 0) = 0;
      queue.push_back(s);
    }
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    const int32_t s = queue[i];
    for (int32_t p : back[static_cast<size_t>(s)]) {
      if (at(p, 0) == kNever) {
        at(p, 0) = at(s, 0) + 1;
        queue.push_back(p);
      }
    }
  }
  for (int32_t j = 1; j < cols; ++j) {
    for (int32_t s = 0; s < m; ++s) {
      int32_t best = kNever;
      for (const Edge& e : edges(s)) best = std::min(best, at(e.to, j - 1));
      at(s, j) = best >= kNever ? kNever : best + 1;
    }
  }
}

int32_t PatternAutomaton::Next(int32_t s, uint32_t cp) const {
  for (const Edge& e : edges(s)) {
    if (cp < e.lo) return -1;
    if (cp <= e.hi) return e.to;
  }
  return -1;
}

bool PatternAutomaton::Viable(int32_t s, int32_t count, int32_t min_length,
                              int32_t max_length) const {
  const int32_t need = std::max(0, min_length - count);
  const int32_t len =
      shortest_[static_cast<size_t>(s) * static_cast<size_t>(columns_) + static_cast<size_t>(need)];
  return len < kNever && (max_length < 0 || count + len <= max_length);
}

bool PatternAutomaton::AnyViable(int32_t s, uint32_t lo, uint32_t hi, int32_t count,
                                 int32_t min_length, int32_t max_length) const {
  for (const Edge& e : edges(s)) {
    if (e.hi < lo) continue;
    if (e.lo > hi) break;
    if (Viable(e.to, count, min_length, max_length)) return true;
  }
  return false;
}

bool PatternAutomaton::Matches(std::string_view utf8) const {
  if (start_ < 0) return false;
  int32_t s = start_;
  for (size_t i = 0; i < utf8.size();) {
    int len = 1;
    s = Next(s, unicode::DecodeUtf8(utf8, i, &len));
    if (s < 0) return false;
    i += static_cast<size_t>(len);
  }
  return accepting(s);
}

}  // namespace cairn::infer::text::json
