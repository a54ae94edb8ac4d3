// The disk tier's file formats (docs/disk-format.md): manifests, chunk and private-state
// headers, footers. Whatever decodes must encode back to the same value.
// Input: a selector byte (manifest, file header, footer), then the bytes to decode.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status/check.h"
#include "services/cache/disk/disk_format.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

namespace cairn::cache {
namespace {

void FuzzManifest(absl::string_view bytes) {
  absl::StatusOr<Manifest> m = DecodeManifest(bytes);
  if (!m.ok()) return;
  CAIRN_CHECK(m->depth == m->tokens.size());
  absl::StatusOr<Manifest> again = DecodeManifest(EncodeManifest(*m));
  CAIRN_CHECK(again.ok() && *again == *m);
}

void FuzzFileHeader(absl::string_view bytes) {
  absl::StatusOr<uint64_t> header_bytes = PeekHeaderBytes(bytes.substr(0, kFileFixedHeaderBytes));
  if (header_bytes.ok()) {
    CAIRN_CHECK(*header_bytes >= kFileFixedHeaderBytes);
    CAIRN_CHECK(*header_bytes <= FormatLimits::kMaxHeaderBytes);
  }
  absl::StatusOr<FileHeader> h = DecodeFileHeader(bytes);
  if (!h.ok()) return;
  absl::StatusOr<std::string> encoded = h->kind == FileKind::kChunk
                                            ? EncodeChunkHeader(h->compat_hash, h->chunk)
                                            : EncodeStateHeader(h->compat_hash, h->state);
  CAIRN_CHECK(encoded.ok());
  absl::StatusOr<FileHeader> again = DecodeFileHeader(*encoded);
  CAIRN_CHECK(again.ok());
  CAIRN_CHECK(again->kind == h->kind && again->payload_bytes == h->payload_bytes &&
              again->compat_hash == h->compat_hash && again->chunk == h->chunk &&
              again->state == h->state);
}

}  // namespace
}  // namespace cairn::cache

CAIRN_FUZZ_TARGET(DiskFormat) {
  cairn::fuzz::FuzzInput in(data, size);
  const uint8_t selector = in.Byte();
  const absl::string_view bytes = in.rest();
  switch (selector % 3) {
    case 0:
      cairn::cache::FuzzManifest(bytes);
      break;
    case 1:
      cairn::cache::FuzzFileHeader(bytes);
      break;
    default:
      if (absl::StatusOr<uint64_t> sum = cairn::cache::DecodeFooter(bytes); sum.ok()) {
        CAIRN_CHECK(cairn::cache::DecodeFooter(cairn::cache::EncodeFooter(*sum)).value_or(~*sum) ==
                    *sum);
      }
      break;
  }
  return 0;
}
