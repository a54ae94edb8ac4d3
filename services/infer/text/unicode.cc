#include "services/infer/text/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace cairn::infer::text::unicode {
namespace {

// Hangul syllable composition constants (Unicode §3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// ASCII class bits, built once from the generated table.
struct AsciiTable {
  std::array<uint8_t, 128> bits{};
  AsciiTable() {
    for (int i = 0; i < kCategoryRangeCount; ++i) {
      const CategoryRange& r = kCategoryRanges[i];
      for (uint32_t cp = r.lo; cp <= r.hi && cp < 128; ++cp) bits[cp] = r.flags;
    }
  }
};

const AsciiTable& Ascii() {
  static const AsciiTable* table = new AsciiTable();
  return *table;
}

uint8_t CombiningClassOf(uint32_t cp) {
  const CombiningClass* end = kCombiningClasses + kCombiningClassCount;
  const CombiningClass* it = std::lower_bound(
      kCombiningClasses, end, cp, [](const CombiningClass& c, uint32_t v) { return c.cp < v; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

const Decomposition* DecompositionOf(uint32_t cp) {
  const Decomposition* end = kCanonicalDecompositions + kCanonicalDecompositionCount;
  const Decomposition* it = std::lower_bound(
      kCanonicalDecompositions, end, cp,
      [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

// Returns the primary composite of (`a`, `b`), or 0 when there is none.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(
      kCompositions, end, std::pair<uint32_t, uint32_t>(a, b),
      [](const Composition& c, const std::pair<uint32_t, uint32_t>& v) {
        return c.first < v.first || (c.first == v.first && c.second < v.second);
      });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = DecompositionOf(cp);
  if (d == nullptr) {
    out->push_back(cp);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

}  // namespace

uint32_t DecodeUtf8(std::string_view s, size_t i, int* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  int n = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    *len = 1;
    return kReplacementChar;
  }
  if (i + n > s.size()) {
    *len = 1;
    return kReplacementChar;
  }
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      *len = 1;
      return kReplacementChar;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
    *len = 1;
    return kReplacementChar;
  }
  *len = n;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint8_t ClassOf(uint32_t cp) {
  if (cp < 128) return Ascii().bits[cp];
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* it = std::upper_bound(
      kCategoryRanges, end, cp, [](uint32_t v, const CategoryRange& r) { return v < r.lo; });
  if (it == kCategoryRanges) return 0;
  --it;
  return cp <= it->hi ? it->flags : 0;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    DecodeUtf8(s, i, &len);
    i += len;
    ++n;
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    if (DecodeUtf8(s, i, &len) == kReplacementChar && len == 1 &&
        static_cast<unsigned char>(s[i]) >= 0x80) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string Nfc(std::string_view s) {
  // Fast path: nothing in `s` can change under NFC.
  bool maybe = false;
  for (size_t i = 0; i < s.size() && !maybe;) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int len = 1;
    uint32_t cp = DecodeUtf8(s, i, &len);
    maybe = (ClassOf(cp) & kNfcMaybe) != 0 || (cp >= kSBase && cp < kSBase + kSCount) ||
            (cp == kReplacementChar && len == 1);
    i += len;
  }
  if (!maybe) return std::string(s);

  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    Decompose(DecodeUtf8(s, i, &len), &cps);
    i += len;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (CombiningClassOf(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && CombiningClassOf(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](uint32_t a, uint32_t b) {
      return CombiningClassOf(a) < CombiningClassOf(b);
    });
    i = j;
  }
  // Canonical composition.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // Index in `out` of the last starter, if any.
  int last_ccc = -1;          // Class of the last code point appended after the starter.
  for (uint32_t cp : cps) {
    const int ccc = CombiningClassOf(cp);
    if (starter != SIZE_MAX) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        uint32_t composite = Compose(out[starter], cp);
        if (composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(s.size());
  for (uint32_t cp : out) AppendUtf8(cp, &result);
  return result;
}

}  // namespace cairn::infer::text::unicode
