#ifndef CAIRN_SERVICES_INFER_TEXT_UNICODE_H_
#define CAIRN_SERVICES_INFER_TEXT_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "services/infer/text/unicode_tables.h"

// UTF-8 decoding, Unicode class lookups and NFC normalisation for the tokenizer.
// All functions are pure and thread-safe.
namespace cairn::infer::text {

// Debian's absl has its own string_view type; converts for absl::StrCat and hash lookups.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace cairn::infer::text

namespace cairn::infer::text::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes the code point starting at `s[i]` and stores its byte length in `*len` (>= 1). An
// invalid or truncated sequence decodes as kReplacementChar with length 1, so that a scan always
// advances.
uint32_t DecodeUtf8(std::string_view s, size_t i, int* len);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Returns the class bits (kLetter, kNumber, kMark, kSpace, kNfcMaybe, kNonPrintable) of `cp`.
uint8_t ClassOf(uint32_t cp);

// Returns the number of code points in `s` (invalid bytes count one each).
size_t CodePointCount(std::string_view s);

// Returns true when `s` is valid UTF-8.
bool IsValidUtf8(std::string_view s);

// Returns the NFC normalisation of `s` (canonical decomposition, canonical ordering, canonical
// composition, Hangul included). Invalid UTF-8 bytes become U+FFFD.
std::string Nfc(std::string_view s);

}  // namespace cairn::infer::text::unicode

#endif  // CAIRN_SERVICES_INFER_TEXT_UNICODE_H_
