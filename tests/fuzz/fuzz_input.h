#ifndef CAIRN_TESTS_FUZZ_FUZZ_INPUT_H_
#define CAIRN_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/strings/string_view.h"

namespace cairn::fuzz {

// Returns `s` as a std::string_view (Debian's absl has its own string_view type).
inline std::string_view Std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// Reads a fuzz input front to back. Every read is bounded by what is left; past the end,
// reads return zeros and empty views, so a target never needs to check sizes itself.
// Thread-compatible.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}

  bool empty() const { return rest_.empty(); }
  absl::string_view rest() const { return rest_; }

  // Returns the next byte, or 0.
  uint8_t Byte() {
    if (rest_.empty()) return 0;
    const uint8_t b = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return b;
  }
  // Returns the next two bytes, little-endian.
  uint16_t U16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | (uint16_t{Byte()} << 8));
  }
  // Returns the next `n` bytes (fewer at the end).
  absl::string_view Bytes(size_t n) {
    const absl::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(out.size());
    return out;
  }
  // Returns the bytes up to the next `separator` (or the end) and skips the separator.
  absl::string_view Until(absl::string_view separator) {
    const size_t at = rest_.find(separator);
    if (at == absl::string_view::npos) return Bytes(rest_.size());
    const absl::string_view out = rest_.substr(0, at);
    rest_.remove_prefix(at + separator.size());
    return out;
  }
  // Returns a length-prefixed piece (u16 length, then that many bytes).
  absl::string_view Piece() { return Bytes(U16()); }

 private:
  absl::string_view rest_;
};

}  // namespace cairn::fuzz

#endif  // CAIRN_TESTS_FUZZ_FUZZ_INPUT_H_
