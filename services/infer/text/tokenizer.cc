#include "services/infer/text/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json/json_scan.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/file_util.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text {
namespace {

using json = nlohmann::json;

// The largest token id accepted: the id table is allocated up to it.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// Ids past this many entries beyond twice the tokenizer's tokens are refused: the id table
// would be mostly holes (real vocabularies are dense), and its size is the file's to choose.
constexpr int64_t kIdSlack = 1024;

absl::Status TooManyTokens(size_t max_tokens) {
  return absl::OutOfRangeError(absl::StrCat("the text is more than ", max_tokens, " tokens"));
}

// A JSON value for an error message: at most 200 bytes of its text.
std::string Excerpt(const json& j) {
  constexpr size_t kMaxBytes = 200;
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxBytes) {
    text.resize(kMaxBytes);
    text = Utf8Lossy(text) + "...";
  }
  return text;
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256 + n in order.
// Returns the inverse: code point -> byte, or -1.
std::vector<int> UnicodeToByteTable() {
  std::vector<int> inverse(512, -1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    if (printable) {
      inverse[b] = b;
    } else {
      inverse[256 + n] = b;
      ++n;
    }
  }
  return inverse;
}

// Converts a byte-level token string (one code point per byte) to raw bytes.
absl::StatusOr<std::string> ByteLevelToBytes(std::string_view token,
                                             const std::vector<int>& inverse) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    int len = 1;
    uint32_t cp = unicode::DecodeUtf8(token, i, &len);
    if (cp >= inverse.size() || inverse[cp] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary entry ", Av(token), " is not byte-level encoded"));
    }
    out.push_back(static_cast<char>(inverse[cp]));
    i += len;
  }
  return out;
}

// nlohmann's value(key, default) throws when the key holds another type than the default's, and
// tokenizer.json comes from the model's folder: these read a field without throwing.
// The string at `key`, or "" when it is absent or not a string.
std::string StringField(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The boolean at `key`, `fallback` when it is absent or null; InvalidArgument naming the field
// for any other type.
absl::StatusOr<bool> BoolField(const json& j, const char* key, bool fallback,
                               std::string_view where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", Av(where), " ", Av(key),
                                                   " must be a boolean, got ", Excerpt(*it)));
  }
  return it->get<bool>();
}

absl::Status ExpectType(const json& j, std::string_view key, std::string_view type) {
  auto it = j.find(std::string(key));
  if (it == j.end() || !it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: missing object ", Av(key)));
  }
  auto t = it->find("type");
  if (t == it->end() || !t->is_string() || t->get<std::string>() != type) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", Av(key), " must be of type ",
                                                   Av(type), ", got ", Excerpt(*it)));
  }
  return absl::OkStatus();
}

// ByteLevel components must not add a prefix space; use_regex must be off for the pre-tokenizer.
absl::Status CheckByteLevel(const json& j, std::string_view where, bool check_regex) {
  if (!j.is_object() || StringField(j, "type") != "ByteLevel") {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", Av(where), " must be ByteLevel, got ", Excerpt(j)));
  }
  ASSIGN_OR_RETURN(const bool prefix_space, BoolField(j, "add_prefix_space", false, where));
  if (prefix_space) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", Av(where), " add_prefix_space=true is not supported"));
  }
  ASSIGN_OR_RETURN(const bool use_regex, BoolField(j, "use_regex", true, where));
  if (check_regex && use_regex) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", Av(where), " use_regex=true is not supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PreTokenizerPattern> ParsePreTokenizer(const json& pre) {
  if (!pre.is_object() || StringField(pre, "type") != "Sequence" ||
      !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array() ||
      pre["pretokenizers"].size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.json: pre_tokenizer must be Sequence[Split, ByteLevel], got ", Excerpt(pre)));
  }
  const json& split = pre["pretokenizers"][0];
  if (!split.is_object() || StringField(split, "type") != "Split" ||
      StringField(split, "behavior") != "Isolated" || !split.contains("invert") ||
      !split["invert"].is_boolean() || split["invert"].get<bool>() || !split.contains("pattern") ||
      !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: unsupported split pre-tokenizer ", Excerpt(split)));
  }
  RETURN_IF_ERROR(CheckByteLevel(pre["pretokenizers"][1], "pre_tokenizer", true));
  return PreTokenizerPatternFromRegex(split["pattern"]["Regex"].get<std::string>());
}

// Splits a merges entry ("a b" or ["a", "b"]) into its two parts.
absl::StatusOr<std::pair<std::string, std::string>> MergeParts(const json& m) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: bad merge \"", s, "\""));
    }
    return std::make_pair(s.substr(0, sp), s.substr(sp + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: bad merge ", Excerpt(m)));
}

// The length of the maximal prefix of an ill-formed or truncated sequence starting at `s[i]`
// (Unicode "maximal subpart"), or 0 when a valid character starts there.
size_t InvalidPrefixLength(std::string_view s, size_t i, bool* truncated) {
  *truncated = false;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 0;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k <= static_cast<size_t>(need); ++k) {
    if (i + k >= s.size()) {
      *truncated = true;
      return k;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return k;
  }
  return 0;
}

// Appends the valid UTF-8 of `bytes` with invalid subsequences replaced. When `hold_truncated`,
// stops before a truncated sequence at the end and returns its offset; else returns size().
size_t AppendLossy(std::string_view bytes, bool hold_truncated, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    bool truncated = false;
    size_t bad = InvalidPrefixLength(bytes, i, &truncated);
    if (bad == 0) {
      int len = 1;
      unicode::DecodeUtf8(bytes, i, &len);
      out->append(bytes.substr(i, len));
      i += len;
      continue;
    }
    if (truncated && hold_truncated) return i;
    unicode::AppendUtf8(unicode::kReplacementChar, out);
    i += bad;
  }
  return i;
}

}  // namespace

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  AppendLossy(bytes, false, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path,
                                                               const TokenizerOptions& options) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromJson(text, options);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               const TokenizerOptions& options) {
  if (FileJsonTooDeep(absl::string_view(tokenizer_json.data(), tokenizer_json.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json nests deeper than ", kMaxFileJsonNesting, " levels"));
  }
  const json root = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer(options));

  // Normaliser: NFC (or none).
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    RETURN_IF_ERROR(ExpectType(root, "normalizer", "NFC"));
  }
  if (!root.contains("pre_tokenizer")) {
    return absl::InvalidArgumentError("tokenizer.json: missing pre_tokenizer");
  }
  ASSIGN_OR_RETURN(t->pattern_, ParsePreTokenizer(root["pre_tokenizer"]));
  if (!root.contains("decoder")) {
    return absl::InvalidArgumentError("tokenizer.json: missing decoder");
  }
  RETURN_IF_ERROR(CheckByteLevel(root["decoder"], "decoder", false));

  RETURN_IF_ERROR(ExpectType(root, "model", "BPE"));
  const json& model = root["model"];
  if (model.contains("continuing_subword_prefix") &&
      !model["continuing_subword_prefix"].is_null() &&
      (!model["continuing_subword_prefix"].is_string() ||
       !model["continuing_subword_prefix"].get<std::string>().empty())) {
    return absl::InvalidArgumentError("tokenizer.json: continuing_subword_prefix not supported");
  }
  if (model.contains("end_of_word_suffix") && model["end_of_word_suffix"].is_string() &&
      !model["end_of_word_suffix"].get<std::string>().empty()) {
    return absl::InvalidArgumentError("tokenizer.json: end_of_word_suffix not supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    return absl::InvalidArgumentError("tokenizer.json: BPE dropout not supported");
  }
  ASSIGN_OR_RETURN(const bool ignore_merges, BoolField(model, "ignore_merges", false, "model"));
  if (ignore_merges) {
    return absl::InvalidArgumentError("tokenizer.json: ignore_merges=true not supported");
  }
  ASSIGN_OR_RETURN(const bool byte_fallback, BoolField(model, "byte_fallback", false, "model"));
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: model needs vocab and merges");
  }

  const std::vector<int> inverse = UnicodeToByteTable();
  const json& vocab = model["vocab"];
  TokenId max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: bad id for ", Av(it.key()),
                                                     " (ids are 0 to ", kMaxTokenId, ")"));
    }
    max_id = std::max(max_id, static_cast<TokenId>(it.value().get<int64_t>()));
  }
  static const json* const kNoTokens = new json(json::array());
  const auto added_it = root.find("added_tokens");
  const json& added = added_it != root.end() && added_it->is_array() ? *added_it : *kNoTokens;
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() > kMaxTokenId) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: bad added token ", Excerpt(a)));
    }
    max_id = std::max(max_id, static_cast<TokenId>(a["id"].get<int64_t>()));
  }
  const int64_t tokens = static_cast<int64_t>(vocab.size() + added.size());
  if (max_id > 2 * tokens + kIdSlack) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: token id ", max_id, " is far past its ", tokens,
                     " tokens (ids must be dense: at most ", 2 * tokens + kIdSlack, ")"));
  }
  t->id_to_bytes_.assign(max_id + 1, std::string());
  t->id_is_special_.assign(max_id + 1, 0);
  t->id_present_.assign(max_id + 1, false);
  t->bytes_to_id_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<TokenId>(it.value().get<int64_t>());
    absl::StatusOr<std::string> bytes = ByteLevelToBytes(it.key(), inverse);
    if (!bytes.ok()) {
      // Byte-fallback vocabularies carry <0xXX> entries that are not byte-level encoded.
      if (!byte_fallback) return bytes.status();
      bytes = it.key();
    }
    t->id_to_bytes_[id] = *bytes;
    t->id_present_[id] = true;
    t->bytes_to_id_.emplace(*std::move(bytes), id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t->bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it != t->bytes_to_id_.end()) {
      t->byte_ids_[b] = it->second;
      continue;
    }
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto fb = t->bytes_to_id_.find(name);
    if (!byte_fallback || fb == t->bytes_to_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: vocabulary has no token for byte ", b));
    }
    t->byte_ids_[b] = fb->second;
    t->id_to_bytes_[fb->second] = std::string(1, static_cast<char>(b));
  }

  const json& merges = model["merges"];
  t->merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const json& m : merges) {
    ASSIGN_OR_RETURN(auto parts, MergeParts(m));
    ASSIGN_OR_RETURN(std::string left, ByteLevelToBytes(parts.first, inverse));
    ASSIGN_OR_RETURN(std::string right, ByteLevelToBytes(parts.second, inverse));
    auto l = t->bytes_to_id_.find(left);
    auto r = t->bytes_to_id_.find(right);
    auto merged = t->bytes_to_id_.find(left + right);
    if (l == t->bytes_to_id_.end() || r == t->bytes_to_id_.end() ||
        merged == t->bytes_to_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: merge ", Excerpt(m), " refers to unknown tokens"));
    }
    const uint64_t key =
        (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    // A merge listed twice takes its last rank, as in tokenizers, whose table is a hash map
    // collected from the list in order.
    t->merges_.insert_or_assign(key, MergeEntry{rank, merged->second});
    ++rank;
  }

  for (const json& a : added) {
    AddedToken tok;
    tok.id = static_cast<TokenId>(a["id"].get<int64_t>());
    tok.content = a["content"].get<std::string>();
    ASSIGN_OR_RETURN(tok.special, BoolField(a, "special", false, "added token"));
    bool unsupported = false;
    for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"}) {
      ASSIGN_OR_RETURN(const bool on, BoolField(a, flag, false, "added token"));
      unsupported = unsupported || on;
    }
    if (unsupported) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: added token ", tok.content,
                       " uses lstrip/rstrip/single_word/normalized, which are not supported"));
    }
    if (tok.content.empty()) {
      return absl::InvalidArgumentError("tokenizer.json: empty added token");
    }
    t->id_to_bytes_[tok.id] = tok.content;
    t->id_is_special_[tok.id] = tok.special ? 1 : 0;
    t->id_present_[tok.id] = true;
    t->added_.push_back(std::move(tok));
  }
  for (const std::string& bytes : t->id_to_bytes_) {
    t->max_token_bytes_ = std::max(t->max_token_bytes_, bytes.size());
  }
  for (size_t i = 0; i < t->added_.size(); ++i) {
    t->added_by_first_byte_[static_cast<unsigned char>(t->added_[i].content[0])].push_back(
        static_cast<int>(i));
  }
  for (auto& list : t->added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return t->added_[a].content.size() > t->added_[b].content.size();
    });
  }
  return t;
}

const AddedToken* Tokenizer::MatchAdded(std::string_view text, size_t pos) const {
  for (int idx : added_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& tok = added_[idx];
    if (text.size() - pos >= tok.content.size() &&
        std::memcmp(text.data() + pos, tok.content.data(), tok.content.size()) == 0) {
      return &tok;
    }
  }
  return nullptr;
}

absl::StatusOr<std::vector<TokenId>> Tokenizer::Encode(std::string_view text,
                                                       const EncodeOptions& options) const {
  if (!unicode::IsValidUtf8(text)) {
    return absl::InvalidArgumentError("text to encode is not valid UTF-8");
  }
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  size_t segment_start = 0;
  size_t span = 0;  // The first literal span that does not end at or before pos.
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (added_by_first_byte_[static_cast<unsigned char>(text[pos])].empty()) continue;
    const AddedToken* tok = MatchAdded(text, pos);
    if (tok == nullptr) continue;
    while (span < options.literal_spans.size() && options.literal_spans[span].second <= pos) ++span;
    const bool literal = span < options.literal_spans.size() &&
                         options.literal_spans[span].first < pos + tok->content.size();
    if (tok->special && (!options.parse_special || literal)) {
      // Text, as in tokenizers (encode_special_tokens): its span is not searched again, so an
      // added token inside it is not matched either.
      pos += tok->content.size() - 1;
      continue;
    }
    if (!EncodeSegment(text.substr(segment_start, pos - segment_start), options.max_tokens, &out)) {
      return TooManyTokens(options.max_tokens);
    }
    out.push_back(tok->id);
    pos += tok->content.size() - 1;
    segment_start = pos + 1;
    if (options.max_tokens > 0 && out.size() > options.max_tokens) {
      return TooManyTokens(options.max_tokens);
    }
  }
  if (!EncodeSegment(text.substr(segment_start), options.max_tokens, &out)) {
    return TooManyTokens(options.max_tokens);
  }
  return out;
}

bool Tokenizer::EncodeSegment(std::string_view segment, size_t max_tokens,
                              std::vector<TokenId>* out) const {
  if (segment.empty()) return true;
  const std::string normalized = unicode::Nfc(segment);
  std::vector<std::string_view> pieces;
  SplitPreTokens(pattern_, normalized, &pieces);
  for (std::string_view piece : pieces) {
    if (max_tokens > 0) {
      // A piece of b bytes is at least b / max_token_bytes_ tokens: one too long to fit is
      // refused before its merges run.
      const size_t least = (piece.size() + max_token_bytes_ - 1) / max_token_bytes_;
      if (out->size() + least > max_tokens) return false;
    }
    EncodeWord(piece, out);
    if (max_tokens > 0 && out->size() > max_tokens) return false;
  }
  return true;
}

void Tokenizer::EncodeWord(std::string_view word, std::vector<TokenId>* out) const {
  if (word.size() == 1) {
    out->push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= options_.cache_max_word_bytes;
  if (cacheable) {
    MutexLock lock(&cache_mu_);
    auto it = cache_.find(Av(word));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t begin = out->size();
  BpeMerge(word, out);
  if (cacheable) {
    MutexLock lock(&cache_mu_);
    if (cache_.size() >= options_.cache_max_words) cache_.clear();
    cache_.emplace(std::string(word), std::vector<TokenId>(out->begin() + begin, out->end()));
  }
}

// Byte-pair merging as the reference does it: repeatedly merge the adjacent pair with the lowest
// merge rank, leftmost first, until no pair has a merge. A min-heap of candidate pairs over a
// linked list of symbols makes this O(n log n); stale heap entries are skipped when popped.
void Tokenizer::BpeMerge(std::string_view word, std::vector<TokenId>* out) const {
  const int n = static_cast<int>(word.size());
  std::vector<TokenId> sym(n);
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<unsigned char>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    TokenId left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int pos) {
    const int r = next[pos];
    if (r < 0) return;
    auto it = merges_.find((static_cast<uint64_t>(sym[pos]) << 32) | static_cast<uint32_t>(sym[r]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, sym[pos], sym[r], it->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (dead[c.pos] || sym[c.pos] != c.left) continue;
    const int r = next[c.pos];
    if (r < 0 || sym[r] != c.right) continue;
    sym[c.pos] = c.merged;
    dead[r] = true;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back(sym[i]);
}

absl::StatusOr<std::string> Tokenizer::DecodeBytes(absl::Span<const TokenId> ids,
                                                   bool skip_special) const {
  std::string out;
  for (TokenId id : ids) {
    if (id < 0 || id >= id_limit() || !id_present_[id]) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary"));
    }
    if (skip_special && id_is_special_[id]) continue;
    out += id_to_bytes_[id];
  }
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const TokenId> ids,
                                              bool skip_special) const {
  ASSIGN_OR_RETURN(std::string bytes, DecodeBytes(ids, skip_special));
  return Utf8Lossy(bytes);
}

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  for (const AddedToken& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = bytes_to_id_.find(Av(token));
  if (it == bytes_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(TokenId id) const {
  return id >= 0 && id < id_limit() && id_is_special_[id] != 0;
}

absl::StatusOr<std::string> StreamingDecoder::Push(TokenId id) {
  ASSIGN_OR_RETURN(std::string bytes, tokenizer_->DecodeBytes({id}, skip_special_));
  pending_ += bytes;
  std::string out;
  const size_t consumed = AppendLossy(pending_, /*hold_truncated=*/true, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamingDecoder::Flush() {
  std::string out = Utf8Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace cairn::infer::text
