#include "common/checksum/checksum.h"

// The state struct is only complete with static linking declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace cairn {

uint64_t Xxh3(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);
}

struct Xxh3Stream::State {
  XXH3_state_t st;
};

Xxh3Stream::Xxh3Stream(uint64_t seed) : state_(std::make_unique<State>()) { Reset(seed); }
Xxh3Stream::~Xxh3Stream() = default;
Xxh3Stream::Xxh3Stream(Xxh3Stream&&) noexcept = default;
Xxh3Stream& Xxh3Stream::operator=(Xxh3Stream&&) noexcept = default;

void Xxh3Stream::Reset(uint64_t seed) { XXH3_64bits_reset_withSeed(&state_->st, seed); }

void Xxh3Stream::Update(const void* data, size_t size) {
  XXH3_64bits_update(&state_->st, data, size);
}

void Xxh3Stream::UpdateU64(uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  Update(b, sizeof(b));
}

uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(&state_->st); }

}  // namespace cairn
