#include "common/shm/bulk_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace cairn {

void BulkCopy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kBulkCopyStreamingMinBytes) {
    auto* out = static_cast<uint8_t*>(dst);
    const auto* in = static_cast<const uint8_t*>(src);
    // Streaming stores need a 16-byte aligned destination: copy the head normally.
    const size_t head = (16 - reinterpret_cast<uintptr_t>(out) % 16) % 16;
    std::memcpy(out, in, head);
    out += head;
    in += head;
    n -= head;
    const size_t body = n / 64 * 64;
    for (size_t i = 0; i < body; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 48), d);
    }
    // Streaming stores are weakly ordered: fence them before anyone may read the copy.
    _mm_sfence();
    std::memcpy(out + body, in + body, n - body);
    return;
  }
#endif
  if (n > 0) std::memcpy(dst, src, n);
}

}  // namespace cairn
