#include "services/infer/text/json_matcher.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"

namespace cairn::infer::text::json {
namespace {

enum NumPhase : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,  // Complete.
  kNumInt,   // Complete.
  kNumDot,
  kNumFrac,  // Complete.
  kNumE,
  kNumESign,
  kNumExp,  // Complete.
};

enum ObjPhase : uint8_t {
  kObjOpen,      // Before '{'.
  kObjFirst,     // After '{'.
  kObjKey,       // Inside a property name (aux: key-trie node).
  kObjExtraKey,  // An additional property's key is the child frame.
  kObjColon,     // After a key (aux: property index, -1 for an additional one).
  kObjValue,     // After ':'.
  kObjInValue,   // The value is the child frame.
  kObjAfter,     // After a value.
  kObjComma,     // After ','.
  kObjClose,     // In a markup object's close text.
  kObjKeyOpen,   // In a markup object's key_open text (an additional member's).
};

enum ArrPhase : uint8_t {
  kArrOpen,     // Before '['.
  kArrFirst,    // After '['.
  kArrInValue,  // An item is the child frame.
  kArrAfter,    // After an item.
  kArrComma,    // After ','.
};

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
uint32_t HexValue(uint8_t b) {
  if (IsDigit(b)) return b - '0';
  if (b >= 'a' && b <= 'f') return b - 'a' + 10u;
  if (b >= 'A' && b <= 'F') return b - 'A' + 10u;
  return 16;
}

using Out = absl::InlinedVector<Stack, 2>;

// Feeds one byte to stacks, appending the stacks it can lead to.
class Stepper {
 public:
  Stepper(const CompiledGrammar& g, Out* out) : g_(g), out_(out) {}

  void Step(const Stack& s, uint8_t b) {
    if (s.empty()) return;  // A complete top-level value: nothing may follow.
    Consume(s, b);
    if (AutoCompletes(s.back(), b)) {
      Stack parent = s;
      parent.pop_back();
      ChildDone(parent);
      Step(parent, b);
    }
  }

  // Appends to `out` each stack `s` plus a fresh frame for one concrete alternative of `node`,
  // each once.
  void Expand(const Stack& s, int32_t node, Out* out) const {
    absl::flat_hash_set<int32_t> seen;
    ExpandOnce(s, node, out, seen);
  }

 private:
  // Expand's walk. An alternative reached again (anyOfs that share a $ref) adds nothing new,
  // and walking it again would cost time exponential in the length of such chains.
  void ExpandOnce(const Stack& s, int32_t node, Out* out,
                  absl::flat_hash_set<int32_t>& seen) const {
    const Node& n = g_.node(node);
    if (n.kind == NodeKind::kAlt) {
      if (!seen.insert(node).second) return;
      for (int32_t alt : n.alts) ExpandOnce(s, alt, out, seen);
      return;
    }
    if (static_cast<int64_t>(s.size()) + n.min_depth > kMaxValueNesting) return;
    Frame f;
    f.node = node;
    if (n.kind == NodeKind::kLiteral) f.aux = n.trie;
    if (n.kind == NodeKind::kSeq) EnterItem(f, n, 0);
    if (n.kind == NodeKind::kString && n.raw) {  // No opening quote.
      f.phase = static_cast<uint8_t>(StrPhase::kBody) + 1;
      f.aux = StringStartAux(g_, n);
    }
    if (n.kind == NodeKind::kObject && n.markup) f.phase = kObjFirst;  // No '{'.
    out->push_back(s);
    out->back().push_back(f);
  }

  // Whether the frame holds a complete value that the next byte `b` may end (numbers,
  // literals, raw strings where `b` is their exit byte).
  bool AutoCompletes(const Frame& f, uint8_t b) const {
    const Node& n = g_.node(f.node);
    if (n.kind == NodeKind::kString) {
      return n.raw && static_cast<uint8_t>(n.raw_exit) == b && RawComplete(g_, n, f);
    }
    if (n.kind == NodeKind::kNumber) {
      return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac || f.phase == kNumExp;
    }
    return n.kind == NodeKind::kLiteral && g_.trie(f.aux).terminal >= 0;
  }

  // Whether a value of `node` may start on top of a stack of `size` frames.
  bool Startable(int32_t node, size_t size) const {
    return node >= 0 && static_cast<int64_t>(size) + g_.node(node).min_depth <= kMaxValueNesting;
  }

  void Emit(Stack s) { out_->push_back(std::move(s)); }

  // Emits `s` with its top frame replaced by `top`.
  void EmitTop(const Stack& s, const Frame& top) {
    Stack next = s;
    next.back() = top;
    Emit(std::move(next));
  }

  void ChildDone(Stack& s) const {
    if (s.empty()) return;
    Frame& f = s.back();
    const Node& n = g_.node(f.node);
    f.blanks = f.newlines = 0;
    if (n.kind == NodeKind::kObject) {
      if (f.phase == kObjInValue) {
        f.phase = kObjAfter;
        if (n.markup) f.progress = 0;  // Then member_end.
      }
      if (f.phase == kObjExtraKey) {
        f.phase = kObjColon;
        f.aux = -1;
        if (n.markup) f.progress = 0;  // Then key_close.
      }
    } else if (n.kind == NodeKind::kArray && f.phase == kArrInValue) {
      f.count = std::min(f.count + 1, n.count_cap);
      f.phase = kArrAfter;
    } else if (n.kind == NodeKind::kSeq && static_cast<size_t>(f.phase) < n.seq.size() &&
               n.seq[f.phase].kind != SeqItem::Kind::kText &&
               n.seq[f.phase].kind != SeqItem::Kind::kChoice && f.aux == 1) {
      EnterItem(f, n, static_cast<size_t>(f.phase) + 1);  // Framed() keeps a value off the end.
    }
  }

  // Moves a kSeq frame to the start of item `phase` (seq.size(): the text `seq_again`).
  static void EnterItem(Frame& f, const Node& n, size_t phase) {
    f.phase = static_cast<uint8_t>(phase);
    f.count = 0;
    f.blanks = f.newlines = 0;
    f.aux =
        phase < n.seq.size() && n.seq[phase].kind == SeqItem::Kind::kChoice ? n.seq[phase].trie : 0;
  }

  void Pop(Stack s) {
    s.pop_back();
    ChildDone(s);
    Emit(std::move(s));
  }

  // Pushes a value of `node` and feeds it `b` (the parent frame is already updated). Stepped,
  // not only consumed: an empty raw string ends before `b` (no JSON value is empty).
  void StartValue(const Stack& s, int32_t node, uint8_t b) {
    Out fresh;
    Expand(s, node, &fresh);
    for (const Stack& f : fresh) Step(f, b);
  }

  enum class Ws { kNot, kTaken, kRefused };
  static Ws Whitespace(Frame& f, uint8_t b) {
    if (b == ' ' || b == '\t') {
      if (f.blanks >= kMaxWhitespaceBlanks) return Ws::kRefused;
      ++f.blanks;
      return Ws::kTaken;
    }
    if (b == '\n') {
      if (f.newlines >= kMaxWhitespaceNewlines) return Ws::kRefused;
      ++f.newlines;
      return Ws::kTaken;
    }
    return Ws::kNot;
  }

  // Feeds `b` to the top frame of `s` only.
  void Consume(const Stack& s, uint8_t b) {
    const Frame& top = s.back();
    const Node& n = g_.node(top.node);
    switch (n.kind) {
      case NodeKind::kString:
        return ConsumeString(s, n, b);
      case NodeKind::kNumber:
        return ConsumeNumber(s, n, b);
      case NodeKind::kLiteral: {
        const int32_t t = g_.TrieChild(top.aux, b);
        if (t < 0) return;
        Frame f = top;
        f.aux = t;
        return EmitTop(s, f);
      }
      case NodeKind::kObject:
        return ConsumeObject(s, n, b);
      case NodeKind::kArray:
        return ConsumeArray(s, n, b);
      case NodeKind::kSeq:
        return ConsumeSeq(s, n, b);
      case NodeKind::kAlt:
        return;  // Never on a stack.
    }
  }

  // A kSeq frame: phase is the item (seq.size(): the text `seq_again`); count the bytes of a
  // text read, or the choice made (in a kChosenValue item); aux the trie node in a kChoice
  // item, 1 while a value item's value is the child frame.
  void ConsumeSeq(const Stack& s, const Node& n, uint8_t b) {
    using Kind = SeqItem::Kind;
    Frame f = s.back();
    const bool again = static_cast<size_t>(f.phase) == n.seq.size();
    const SeqItem* item = again ? nullptr : &n.seq[f.phase];
    const Kind kind = again ? Kind::kText : item->kind;
    if (kind == Kind::kValue || kind == Kind::kChosenValue) {
      switch (Whitespace(f, b)) {
        case Ws::kTaken:
          return EmitTop(s, f);
        case Ws::kRefused:
          return;
        case Ws::kNot:
          break;
      }
      const int32_t value =
          kind == Kind::kValue ? item->value : item->values[static_cast<size_t>(f.count)];
      f.aux = 1;
      Stack next = s;
      next.back() = f;
      if (Startable(value, next.size())) StartValue(next, value, b);
      return;
    }
    if (kind == Kind::kChoice) {
      const int32_t t = g_.TrieChild(f.aux, b);
      if (t < 0) return;
      f.aux = t;
      if (!g_.trie(t).children.empty()) EmitTop(s, f);  // A longer text may go on.
      const int32_t chosen = g_.trie(t).terminal;
      if (chosen < 0) return;
      EnterItem(f, n, static_cast<size_t>(f.phase) + 1);  // Framed() puts an item after it.
      f.count = chosen;
      return EmitTop(s, f);
    }
    const std::string& text = again ? n.seq_again : item->text;
    if (static_cast<uint8_t>(text[static_cast<size_t>(f.count)]) != b) return;
    if (static_cast<size_t>(++f.count) < text.size()) return EmitTop(s, f);
    if (again || static_cast<size_t>(f.phase) + 1 < n.seq.size()) {
      EnterItem(f, n, again ? 0 : static_cast<size_t>(f.phase) + 1);
      return EmitTop(s, f);
    }
    if (!n.seq_again.empty()) {
      EnterItem(f, n, n.seq.size());
      EmitTop(s, f);
    }
    Pop(s);
  }

  void ConsumeString(const Stack& s, const Node& n, uint8_t b) {
    Frame f = s.back();
    if (n.raw) {
      if (RawContentStep(g_, n, f, b) == StrStep::kStay) EmitTop(s, f);
      return;
    }
    if (f.phase == 0) {
      if (b != '"') return;
      f.phase = static_cast<uint8_t>(StrPhase::kBody) + 1;
      f.aux = StringStartAux(g_, n);
    } else {
      const StrStep::Result r = StringContentStep(g_, n, f, b);
      if (r == StrStep::kReject) return;
      if (r == StrStep::kClose) return Pop(s);
    }
    EmitTop(s, f);
  }

  void ConsumeNumber(const Stack& s, const Node& n, uint8_t b) {
    Frame f = s.back();
    const bool digit = IsDigit(b);
    const bool exp = !n.integer && (b == 'e' || b == 'E');
    const bool dot = !n.integer && b == '.';
    auto go = [&](NumPhase p, int32_t count) {
      f.phase = p;
      f.count = count;
      EmitTop(s, f);
    };
    switch (f.phase) {
      case kNumStart:
      case kNumMinus:
        if (f.phase == kNumStart && b == '-' && !n.no_minus) return go(kNumMinus, 0);
        if (b == '0') {
          if (n.no_zero) return;
          return go(kNumZero, 1);
        }
        if (digit) return go(kNumInt, 1);
        return;
      case kNumZero:
      case kNumInt:
        if (digit && f.phase == kNumInt && f.count < n.max_digits) {
          return go(kNumInt, f.count + 1);
        }
        if (dot) return go(kNumDot, 0);
        if (exp) return go(kNumE, 0);
        return;
      case kNumDot:
        if (digit) return go(kNumFrac, 1);
        return;
      case kNumFrac:
        if (digit && f.count < kMaxFractionDigits) return go(kNumFrac, f.count + 1);
        if (exp) return go(kNumE, 0);
        return;
      case kNumE:
        if (b == '+' || b == '-') return go(kNumESign, 0);
        if (digit) return go(kNumExp, 1);
        return;
      case kNumESign:
        if (digit) return go(kNumExp, 1);
        return;
      case kNumExp:
        if (digit && f.count < kMaxExponentDigits) return go(kNumExp, f.count + 1);
        return;
      default:
        return;
    }
  }

  // Whether property `j`, reachable from key-trie node `t`, may come next.
  bool KeyFits(const Node& n, const Frame& f, int32_t t, size_t size) const {
    const int32_t last = n.next_required[static_cast<size_t>(f.count)];
    for (int32_t j : g_.trie(t).below) {
      if (j < f.count) continue;
      if (j > last) break;
      if (Startable(n.props[static_cast<size_t>(j)].value, size)) return true;
    }
    return false;
  }

  bool ExtraFits(const Node& n, const Frame& f, size_t size) const {
    return n.additional >= 0 &&
           n.next_required[static_cast<size_t>(f.count)] == static_cast<int32_t>(n.props.size()) &&
           Startable(n.additional, size);
  }

  bool CanClose(const Node& n, const Frame& f) const {
    return n.next_required[static_cast<size_t>(f.count)] == static_cast<int32_t>(n.props.size());
  }

  // Starts a key (`b` is '"') in either form: a named property or an additional one.
  void StartKey(const Stack& s, const Node& n, Frame f) {
    f.blanks = f.newlines = 0;
    const int32_t t = g_.TrieChild(n.key_trie, '"');
    if (t >= 0 && KeyFits(n, f, t, s.size())) {
      Stack next = s;
      next.back() = f;
      next.back().phase = kObjKey;
      next.back().aux = t;
      Emit(std::move(next));
    }
    if (ExtraFits(n, f, s.size())) {
      Stack next = s;
      next.back() = f;
      next.back().phase = kObjExtraKey;
      next.back().count = static_cast<int32_t>(n.props.size());
      Frame key;
      key.node = n.extra_key;
      key.phase = static_cast<uint8_t>(StrPhase::kBody) + 1;
      key.aux = StringStartAux(g_, g_.node(n.extra_key));
      next.push_back(key);
      Emit(std::move(next));
    }
  }

  // Feeds `b` to the key-trie walk of object frame `f` (in kObjKey); at a key's end the frame
  // goes to `after` with the property chosen.
  void KeyByte(const Stack& s, const Node& n, Frame f, uint8_t b, ObjPhase after) {
    const int32_t t = g_.TrieChild(f.aux, b);
    if (t < 0 || !KeyFits(n, f, t, s.size())) return;
    const int32_t j = g_.trie(t).terminal;
    if (j >= 0) {
      f.phase = after;
      f.aux = j;
      f.count = j + 1;
    } else {
      f.aux = t;
    }
    EmitTop(s, f);
  }

  // A markup object (Node::markup): kObjFirst between members (a key's text, key_open or
  // `close` next), kObjKey in a key's text, kObjKeyOpen in key_open, kObjExtraKey with the key
  // as the child frame, kObjColon in key_close, kObjValue before the value (no whitespace),
  // kObjInValue, kObjAfter in `member_end`, kObjClose in `close` (progress: the bytes read of
  // the text).
  void ConsumeMarkupObject(const Stack& s, const Node& n, uint8_t b) {
    Frame f = s.back();
    switch (f.phase) {
      case kObjFirst: {
        const int32_t t = g_.TrieChild(n.key_trie, b);
        if (t >= 0 && KeyFits(n, f, t, s.size())) {
          Frame key = f;
          key.phase = kObjKey;
          key.aux = t;
          EmitTop(s, key);
        }
        if (ExtraFits(n, f, s.size()) && static_cast<uint8_t>(n.key_open[0]) == b) {
          Frame open = f;
          open.phase = kObjKeyOpen;
          open.progress = 0;
          MarkupText(s, n, open, b);
        }
        if (CanClose(n, f) && static_cast<uint8_t>(n.close[0]) == b) {
          f.phase = kObjClose;
          f.progress = 0;
          MarkupText(s, n, f, b);
        }
        return;
      }
      case kObjKey:
        return KeyByte(s, n, f, b, kObjValue);
      case kObjValue: {
        f.phase = kObjInValue;
        Stack next = s;
        next.back() = f;
        const int32_t value = f.aux >= 0 ? n.props[static_cast<size_t>(f.aux)].value : n.additional;
        return StartValue(next, value, b);
      }
      case kObjAfter:
      case kObjClose:
      case kObjKeyOpen:
      case kObjColon:
        return MarkupText(s, n, f, b);
      default:
        return;
    }
  }

  // Feeds `b` to the text a markup object frame `f` is in (its phase's: member_end, close,
  // key_open, key_close; progress its bytes read), and at the text's end goes on: to the next
  // member, out of the object, into an additional member's key, or to its value.
  void MarkupText(const Stack& s, const Node& n, Frame f, uint8_t b) {
    const std::string& text = f.phase == kObjAfter     ? n.member_end
                              : f.phase == kObjClose   ? n.close
                              : f.phase == kObjKeyOpen ? n.key_open
                                                       : n.key_close;
    if (static_cast<uint8_t>(text[f.progress]) != b) return;
    if (static_cast<size_t>(++f.progress) < text.size()) return EmitTop(s, f);
    f.progress = 0;
    switch (f.phase) {
      case kObjClose:
        return Pop(s);
      case kObjAfter:
        f.phase = kObjFirst;
        return EmitTop(s, f);
      case kObjColon:
        f.phase = kObjValue;
        return EmitTop(s, f);
      default: {  // kObjKeyOpen: the key is read by a frame of its own.
        Stack next = s;
        next.back() = f;
        next.back().phase = kObjExtraKey;
        Out fresh;
        Expand(next, n.extra_key, &fresh);
        for (Stack& k : fresh) Emit(std::move(k));
        return;
      }
    }
  }

  void ConsumeObject(const Stack& s, const Node& n, uint8_t b) {
    if (n.markup) return ConsumeMarkupObject(s, n, b);
    Frame f = s.back();
    if (f.phase == kObjOpen) {
      if (b != '{') return;
      f.phase = kObjFirst;
      return EmitTop(s, f);
    }
    if (f.phase == kObjKey) return KeyByte(s, n, f, b, kObjColon);
    if (f.phase == kObjExtraKey || f.phase == kObjInValue) return;
    const Ws ws = Whitespace(f, b);
    if (ws == Ws::kTaken) return EmitTop(s, f);
    if (ws == Ws::kRefused) return;
    f.blanks = f.newlines = 0;
    switch (f.phase) {
      case kObjFirst:
      case kObjComma:
        if (b == '"') return StartKey(s, n, f);
        if (b == '}' && f.phase == kObjFirst && CanClose(n, f)) return Pop(s);
        return;
      case kObjColon:
        if (b != ':') return;
        f.phase = kObjValue;
        return EmitTop(s, f);
      case kObjValue: {
        const int32_t value = f.aux >= 0 ? n.props[static_cast<size_t>(f.aux)].value : n.additional;
        f.phase = kObjInValue;
        Stack next = s;
        next.back() = f;
        return StartValue(next, value, b);
      }
      case kObjAfter:
        if (b == ',') {
          const int32_t t = g_.TrieChild(n.key_trie, '"');
          if ((t >= 0 && KeyFits(n, f, t, s.size())) || ExtraFits(n, f, s.size())) {
            f.phase = kObjComma;
            return EmitTop(s, f);
          }
          return;
        }
        if (b == '}' && CanClose(n, f)) return Pop(s);
        return;
      default:
        return;
    }
  }

  int32_t ItemNode(const Node& n, int32_t count) const {
    return static_cast<size_t>(count) < n.prefix.size() ? n.prefix[static_cast<size_t>(count)]
                                                        : n.items;
  }

  bool MoreItems(const Node& n, const Frame& f, size_t size) const {
    return (n.max_items < 0 || f.count < n.max_items) && Startable(ItemNode(n, f.count), size);
  }

  void ConsumeArray(const Stack& s, const Node& n, uint8_t b) {
    Frame f = s.back();
    if (f.phase == kArrOpen) {
      if (b != '[') return;
      f.phase = kArrFirst;
      return EmitTop(s, f);
    }
    if (f.phase == kArrInValue) return;
    const Ws ws = Whitespace(f, b);
    if (ws == Ws::kTaken) return EmitTop(s, f);
    if (ws == Ws::kRefused) return;
    f.blanks = f.newlines = 0;
    switch (f.phase) {
      case kArrFirst:
        if (b == ']') {
          if (n.min_items == 0) Pop(s);
          return;
        }
        [[fallthrough]];
      case kArrComma:
        if (MoreItems(n, f, s.size())) {
          const int32_t item = ItemNode(n, f.count);
          f.phase = kArrInValue;
          Stack next = s;
          next.back() = f;
          StartValue(next, item, b);
        }
        return;
      case kArrAfter:
        if (b == ',' && MoreItems(n, f, s.size())) {
          f.phase = kArrComma;
          return EmitTop(s, f);
        }
        if (b == ']' && f.count >= n.min_items) return Pop(s);
        return;
      default:
        return;
    }
  }

  const CompiledGrammar& g_;
  Out* out_;
};

}  // namespace

StrStep StringStep(StrPhase phase, uint8_t b, bool allow_escapes, uint32_t partial) {
  StrStep r;
  r.result = StrStep::kStay;
  auto to = [&](StrPhase p, uint32_t value) {
    r.next = p;
    r.value = value;
    return r;
  };
  auto done = [&](uint32_t cp) {
    r.char_end = true;
    return to(StrPhase::kBody, cp);
  };
  const StrStep reject;
  if (phase == StrPhase::kBody) {  // Most bytes: first, and without the decoding below.
    r.char_start = true;
    if (b == '"') {
      r.result = StrStep::kClose;
      r.char_start = false;
      return r;
    }
    if (b == '\\') return allow_escapes ? to(StrPhase::kEscape, 0) : reject;
    if (b < 0x20) return reject;
    if (b < 0x80) return done(b);
    if (b >= 0xC2 && b <= 0xDF) return to(StrPhase::kCont1, b & 0x1Fu);
    if (b == 0xE0) return to(StrPhase::kCont2E0, 0);
    if (b == 0xED) return to(StrPhase::kCont2ED, 0xD);
    if (b >= 0xE1 && b <= 0xEF) return to(StrPhase::kCont2, b & 0x0Fu);
    if (b == 0xF0) return to(StrPhase::kCont3F0, 0);
    if (b >= 0xF1 && b <= 0xF3) return to(StrPhase::kCont3, b & 0x07u);
    if (b == 0xF4) return to(StrPhase::kCont3F4, 4);
    return reject;
  }
  const uint32_t hex = HexValue(b);  // 16: not a hex digit.
  const bool cont = b >= 0x80 && b <= 0xBF;
  const uint32_t bits = partial << 6 | (b & 0x3Fu);  // With a continuation byte.
  switch (phase) {
    case StrPhase::kBody:  // Above.
      return reject;
    case StrPhase::kEscape:
      switch (b) {
        case 'u':
          return to(StrPhase::kHex0, 0);
        case '"':
        case '\\':
        case '/':
          return done(b);
        case 'b':
          return done(0x08);
        case 'f':
          return done(0x0C);
        case 'n':
          return done(0x0A);
        case 'r':
          return done(0x0D);
        case 't':
          return done(0x09);
        default:
          return reject;
      }
    case StrPhase::kHex0:
      if (hex == 0xD) return to(StrPhase::kHex1AfterD, 0xD);
      return hex < 16 ? to(StrPhase::kHex1, hex) : reject;
    case StrPhase::kHex1:
      return hex < 16 ? to(StrPhase::kHex2, partial << 4 | hex) : reject;
    case StrPhase::kHex1AfterD:
      if (hex <= 7) return to(StrPhase::kHex2, 0xD0 | hex);
      if (hex >= 8 && hex <= 0xB) return to(StrPhase::kHighHex2, hex - 8);
      return reject;  // A lone low surrogate (or not hex).
    case StrPhase::kHex2:
      return hex < 16 ? to(StrPhase::kHex3, partial << 4 | hex) : reject;
    case StrPhase::kHex3:
      return hex < 16 ? done(partial << 4 | hex) : reject;
    case StrPhase::kHighHex2:
      return hex < 16 ? to(StrPhase::kHighHex3, partial << 4 | hex) : reject;
    case StrPhase::kHighHex3:  // `value`: the high surrogate's 10 bits.
      return hex < 16 ? to(StrPhase::kLowBackslash, partial << 4 | hex) : reject;
    case StrPhase::kLowBackslash:
      return b == '\\' ? to(StrPhase::kLowU, partial) : reject;
    case StrPhase::kLowU:
      return b == 'u' ? to(StrPhase::kLowHex0, partial) : reject;
    case StrPhase::kLowHex0:
      return hex == 0xD ? to(StrPhase::kLowHex1, partial) : reject;
    case StrPhase::kLowHex1:
      return hex >= 0xC && hex <= 0xF ? to(StrPhase::kLowHex2, partial << 2 | (hex - 0xC)) : reject;
    case StrPhase::kLowHex2:
      return hex < 16 ? to(StrPhase::kLowHex3, partial << 4 | hex) : reject;
    case StrPhase::kLowHex3:
      return hex < 16 ? done(0x10000 + (partial << 4 | hex)) : reject;
    case StrPhase::kCont1:
      return cont ? done(bits) : reject;
    case StrPhase::kCont2:
    case StrPhase::kCont2E0:
    case StrPhase::kCont2ED: {
      const bool ok = phase == StrPhase::kCont2E0   ? b >= 0xA0 && b <= 0xBF
                      : phase == StrPhase::kCont2ED ? b >= 0x80 && b <= 0x9F
                                                    : cont;
      return ok ? to(StrPhase::kCont1, bits) : reject;
    }
    case StrPhase::kCont3:
    case StrPhase::kCont3F0:
    case StrPhase::kCont3F4: {
      const bool ok = phase == StrPhase::kCont3F0   ? b >= 0x90 && b <= 0xBF
                      : phase == StrPhase::kCont3F4 ? b >= 0x80 && b <= 0x8F
                                                    : cont;
      return ok ? to(StrPhase::kCont2, bits) : reject;
    }
    case StrPhase::kCount:
      return reject;
  }
  return reject;
}

int ForbidStep(const std::vector<std::string>& forbid, uint8_t state, uint8_t b) {
  if (state == 0) {  // Most bytes: no text begins with them.
    int next = 0;
    for (size_t j = 0; j < forbid.size(); ++j) {
      if (static_cast<uint8_t>(forbid[j][0]) != b) continue;
      if (forbid[j].size() == 1) return -1;
      if (next == 0) next = static_cast<int>(j << 6 | 1);
    }
    return next;
  }
  // The text so far ends in `held` and then b: the longest suffix of that which is a prefix of
  // a text (or one whole: -1). A suffix of the held prefix is a prefix of its text too, so
  // only the held text's bytes need looking at.
  std::string s = forbid[state >> 6].substr(0, state & 63);
  s.push_back(static_cast<char>(b));
  for (const std::string& text : forbid) {
    if (s.size() >= text.size() && s.compare(s.size() - text.size(), text.size(), text) == 0) {
      return -1;
    }
  }
  for (size_t k = s.size(); k > 0; --k) {
    for (size_t j = 0; j < forbid.size(); ++j) {
      if (forbid[j].size() > k && forbid[j].compare(0, k, s, s.size() - k, k) == 0) {
        return static_cast<int>(j << 6 | k);
      }
    }
  }
  return 0;
}

StrStep RawStep(StrPhase phase, uint8_t b, uint32_t partial, const std::vector<std::string>& forbid,
                uint8_t* progress) {
  StrStep st;
  if (phase == StrPhase::kBody && b < 0x80) {
    if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') return st;
    st.result = StrStep::kStay;
    st.next = StrPhase::kBody;
    st.char_start = st.char_end = true;
    st.value = b;
  } else {
    // A UTF-8 lead or continuation byte: as in a JSON string (none of them is a quote,
    // backslash or control character).
    st = StringStep(phase, b, false, partial);
    if (st.result != StrStep::kStay) return StrStep{};
  }
  const int next = ForbidStep(forbid, *progress, b);
  if (next < 0) return StrStep{};
  *progress = static_cast<uint8_t>(next);
  return st;
}

namespace {

// The scalar values a character read up to `phase` (its bits so far `partial`) can still turn
// out to be: one or two ranges, returned in `lo`/`hi`; returns how many.
int CharRanges(StrPhase phase, uint32_t partial, uint32_t lo[2], uint32_t hi[2]) {
  auto one = [&](uint32_t l, uint32_t h) {
    lo[0] = l;
    hi[0] = h;
    return 1;
  };
  auto two = [&](uint32_t l0, uint32_t h0, uint32_t l1, uint32_t h1) {
    lo[1] = l1;
    hi[1] = h1;
    one(l0, h0);
    return 2;
  };
  const uint32_t astral = 0x10000;
  switch (phase) {
    case StrPhase::kEscape:
    case StrPhase::kHex0:
      return two(0, 0xD7FF, 0xE000, 0x10FFFF);
    case StrPhase::kHex1:
      return one(partial << 12, partial << 12 | 0xFFF);
    case StrPhase::kHex1AfterD:
      return two(0xD000, 0xD7FF, astral, 0x10FFFF);
    case StrPhase::kHex2:
      return one(partial << 8, partial << 8 | 0xFF);
    case StrPhase::kHex3:
      return one(partial << 4, partial << 4 | 0xF);
    case StrPhase::kHighHex2:
      return one(astral + (partial << 18), astral + (partial << 18) + 0x3FFFF);
    case StrPhase::kHighHex3:
      return one(astral + (partial << 14), astral + (partial << 14) + 0x3FFF);
    case StrPhase::kLowBackslash:
    case StrPhase::kLowU:
    case StrPhase::kLowHex0:
    case StrPhase::kLowHex1:
      return one(astral + (partial << 10), astral + (partial << 10) + 0x3FF);
    case StrPhase::kLowHex2:
      return one(astral + (partial << 8), astral + (partial << 8) + 0xFF);
    case StrPhase::kLowHex3:
      return one(astral + (partial << 4), astral + (partial << 4) + 0xF);
    case StrPhase::kCont1:
      return one(partial << 6, partial << 6 | 0x3F);
    case StrPhase::kCont2:
      return one(partial << 12, partial << 12 | 0xFFF);
    case StrPhase::kCont2E0:
      return one(0x800, 0xFFF);
    case StrPhase::kCont2ED:
      return one(0xD000, 0xD7FF);
    case StrPhase::kCont3:
      return one(partial << 18, partial << 18 | 0x3FFFF);
    case StrPhase::kCont3F0:
      return one(astral, 0x3FFFF);
    case StrPhase::kCont3F4:
      return one(0x100000, 0x10FFFF);
    case StrPhase::kBody:
    case StrPhase::kCount:
      break;
  }
  return 0;
}

}  // namespace

bool PatternViable(const CompiledGrammar& g, const Node& n, int32_t aux, StrPhase phase,
                   int32_t count) {
  const PatternAutomaton& p = g.pattern(n.pattern);
  const int32_t state = PatternStateOf(aux);
  if (phase == StrPhase::kBody) return p.Viable(state, count, n.min_length, n.max_length);
  uint32_t lo[2], hi[2];
  const int ranges = CharRanges(phase, PatternPartialOf(aux), lo, hi);
  for (int i = 0; i < ranges; ++i) {
    if (p.AnyViable(state, lo[i], hi[i], count, n.min_length, n.max_length)) return true;
  }
  return false;
}

int32_t StringStartAux(const CompiledGrammar& g, const Node& n) {
  return n.pattern >= 0 ? PatternAux(g.pattern(n.pattern).start(), 0) : n.exclude_trie;
}

ByteMatcher::ByteMatcher(const CompiledGrammar* grammar) : grammar_(grammar) {
  Out fresh;
  Stepper(*grammar_, nullptr).Expand(Stack(), grammar_->root(), &fresh);
  std::sort(fresh.begin(), fresh.end());
  fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
  if (fresh.size() > static_cast<size_t>(kMaxParallelStacks)) fresh.resize(kMaxParallelStacks);
  stacks_ = std::move(fresh);
}

ByteMatcher::ByteMatcher(const CompiledGrammar* grammar, Stack stack) : grammar_(grammar) {
  stacks_.push_back(std::move(stack));
}

bool ByteMatcher::Advance(uint8_t b) {
  Out out;
  Stepper stepper(*grammar_, &out);
  for (const Stack& s : stacks_) stepper.Step(s, b);
  if (out.empty()) return false;
  if (out.size() > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.size() > static_cast<size_t>(kMaxParallelStacks)) out.resize(kMaxParallelStacks);
  }
  stacks_ = std::move(out);
  return true;
}

bool ByteMatcher::AdvanceAll(std::string_view bytes) {
  if (stacks_.size() <= 1) {
    for (char c : bytes) {
      if (!Advance(static_cast<uint8_t>(c))) return false;
    }
    return true;
  }
  // Stack by stack, so that the kMaxParallelStacks cap applies as in a walk from each stack
  // (JsonConstraint's masks): a token allowed from one stack is then accepted.
  Out out;
  for (const Stack& s : stacks_) {
    ByteMatcher one(grammar_, s);
    if (!one.AdvanceAll(bytes)) continue;
    for (Stack& t : one.stacks_) out.push_back(std::move(t));
  }
  if (out.empty()) return false;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.size() > static_cast<size_t>(kMaxParallelStacks)) out.resize(kMaxParallelStacks);
  stacks_ = std::move(out);
  return true;
}

bool ByteMatcher::Complete() const {
  for (const Stack& s : stacks_) {
    if (s.empty()) return true;
    if (s.size() != 1) continue;
    const Frame& f = s.back();
    const Node& n = grammar_->node(f.node);
    if (n.kind == NodeKind::kNumber &&
        (f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac || f.phase == kNumExp)) {
      return true;
    }
    if (n.kind == NodeKind::kLiteral && grammar_->trie(f.aux).terminal >= 0) return true;
  }
  return false;
}

bool ByteMatcher::AtEnd() const {
  if (!Complete()) return false;
  for (int b = 0; b < 256; ++b) {
    ByteMatcher copy = *this;
    if (copy.Advance(static_cast<uint8_t>(b))) return false;
  }
  return true;
}

}  // namespace cairn::infer::text::json
