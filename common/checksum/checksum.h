#ifndef CAIRN_COMMON_CHECKSUM_CHECKSUM_H_
#define CAIRN_COMMON_CHECKSUM_CHECKSUM_H_

// XXH3-64 checksums (RocksDB's default kXXH3), one-shot and streaming.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"

namespace cairn {

// Returns the XXH3-64 hash of `data[0, size)` with `seed`.
uint64_t Xxh3(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t Xxh3(absl::string_view s, uint64_t seed = 0) {
  return Xxh3(s.data(), s.size(), seed);
}

// Streaming XXH3-64: Update() over pieces gives the same digest as Xxh3() over their
// concatenation. Thread-compatible.
class Xxh3Stream {
 public:
  explicit Xxh3Stream(uint64_t seed = 0);
  ~Xxh3Stream();
  Xxh3Stream(Xxh3Stream&&) noexcept;
  Xxh3Stream& operator=(Xxh3Stream&&) noexcept;

  void Update(const void* data, size_t size);
  void Update(absl::string_view s) { Update(s.data(), s.size()); }
  // Appends a little-endian fixed-width integer (for hashing identity fields with payloads).
  void UpdateU64(uint64_t v);
  uint64_t Digest() const;
  void Reset(uint64_t seed = 0);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_CHECKSUM_CHECKSUM_H_
