#ifndef CAIRN_SERVICES_CACHE_DISK_DISK_FORMAT_H_
#define CAIRN_SERVICES_CACHE_DISK_DISK_FORMAT_H_

// On-disk formats of the disk tier (docs/reliability.md P10-P13).
//
// Chunk and private-state files:  header | payload | footer
//   header  = fixed prefix {magic u64, version u32, kind u32, header_bytes u32, reserved u32,
//             payload_bytes u64, compat_hash u64} + the kind's identity and position fields;
//   footer  = {checksum u64, footer magic u64}, checksum = XXH3-64 over header and payload,
//             so an intact file in the wrong place fails as surely as a damaged one (P11).
// Manifest files: the encoded Manifest followed by XXH3-64 of everything before it (P12).
// Integers are little-endian; strings are a u32 length and bytes. Every count and length is
// bounded before anything is allocated, with overflow-checked products (P13).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::cache {

enum class FileKind : uint32_t { kChunk = 1, kState = 2, kManifest = 3 };
enum class SectionKind : uint32_t { kPrivate = 1, kTail = 2 };

inline constexpr uint32_t kDiskFormatVersion = 1;  // Chunk and private-state files.
// Manifests: version 2 adds the capture kind; version 1 manifests (no kind) still load.
inline constexpr uint32_t kManifestFormatVersion = 2;
inline constexpr uint64_t kFileFixedHeaderBytes = 40;
inline constexpr uint64_t kFileFooterBytes = 16;

// Parser bounds (P13).
struct FormatLimits {
  static constexpr uint64_t kMaxTokens = uint64_t{1} << 24;
  static constexpr uint64_t kMaxChunks = uint64_t{1} << 20;
  static constexpr uint64_t kMaxSections = 4096;
  static constexpr uint64_t kMaxString = 1024;
  static constexpr uint64_t kMaxFileName = 128;
  static constexpr uint64_t kMaxHeaderBytes = 1 << 20;
  static constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;
  static constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 28;
  static constexpr uint32_t kMaxCaptureKind = 255;
};

// Identity and position of one chunk of rows (P10).
struct ChunkIdentity {
  uint64_t chunk_id = 0;  // Names the producing computation's chunk (provenance).
  uint32_t component_id = 0;
  uint64_t first_row = 0;
  uint32_t rows = 0;
  uint64_t row_bytes = 0;
  friend bool operator==(const ChunkIdentity&, const ChunkIdentity&) = default;
};

// One piece of a checkpoint's private-state file: a component's private state, or its tail
// (the rows of the last partial chunk).
struct StateSection {
  uint32_t component_id = 0;
  SectionKind kind = SectionKind::kPrivate;
  uint64_t first_row = 0;  // kTail: first row of the tail.
  uint32_t rows = 0;       // kTail: rows in the tail.
  uint64_t bytes = 0;
  friend bool operator==(const StateSection&, const StateSection&) = default;
};

struct StateIdentity {
  uint64_t checkpoint_id = 0;
  uint64_t depth = 0;
  std::vector<StateSection> sections;  // The payload is their bytes, in this order.
  friend bool operator==(const StateIdentity&, const StateIdentity&) = default;
};

// A decoded chunk or state file header.
struct FileHeader {
  FileKind kind = FileKind::kChunk;
  uint64_t header_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t compat_hash = 0;
  ChunkIdentity chunk;  // kChunk.
  StateIdentity state;  // kState.
};

// Returns the header of a chunk file; InvalidArgument if rows x row_bytes overflows.
absl::StatusOr<std::string> EncodeChunkHeader(uint64_t compat_hash, const ChunkIdentity& id);
// Returns the header of a private-state file (payload = the sum of section bytes).
absl::StatusOr<std::string> EncodeStateHeader(uint64_t compat_hash, const StateIdentity& id);
// Returns header_bytes from the fixed prefix (the first kFileFixedHeaderBytes bytes), after
// checking magic, version and bounds. DataLoss on any mismatch.
absl::StatusOr<uint64_t> PeekHeaderBytes(absl::string_view prefix);
// Decodes a whole header. DataLoss on any malformed or inconsistent field.
absl::StatusOr<FileHeader> DecodeFileHeader(absl::string_view header);
std::string EncodeFooter(uint64_t checksum);
// Returns the checksum stored in a footer; DataLoss on a bad footer magic.
absl::StatusOr<uint64_t> DecodeFooter(absl::string_view footer);

struct ManifestFile {
  std::string name;       // File name inside its directory (ValidFileName).
  uint64_t length = 0;    // Whole file, header and footer included.
  uint64_t checksum = 0;  // The file's footer checksum.
  friend bool operator==(const ManifestFile&, const ManifestFile&) = default;
};

struct ManifestChunk {
  ChunkIdentity id;
  ManifestFile file;
  friend bool operator==(const ManifestChunk&, const ManifestChunk&) = default;
};

// The commit record of one checkpoint (P12).
struct Manifest {
  uint64_t checkpoint_id = 0;
  uint64_t generation = 0;  // Monotonic over publishes.
  uint64_t depth = 0;       // Tokens covered; equals tokens.size().
  std::string compat_digest;
  std::string input_digest;
  std::vector<uint32_t> tokens;
  uint64_t token_hash = 0;  // TokenHash(tokens).
  ManifestFile state_file;
  std::vector<StateSection> sections;
  std::vector<ManifestChunk> chunks;
  // Why the checkpoint was captured, as the cache core numbers its capture kinds (opaque to
  // the disk tier; 0 = a prompt end, also what a version 1 manifest reads as).
  uint32_t capture_kind = 0;
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

// Returns the encoded manifest (version kManifestFormatVersion) with its trailing checksum.
std::string EncodeManifest(const Manifest& manifest);
// The same in the version 1 layout (no capture kind): for compatibility tests only.
std::string EncodeManifestV1ForTest(const Manifest& manifest);
// Decodes a manifest; DataLoss if it is short, its checksum fails or any field is out of
// bounds or inconsistent (torn manifests are ignored by the caller).
absl::StatusOr<Manifest> DecodeManifest(absl::string_view bytes);

// Chunk entries decoded once however many manifests list them: start-up decodes every
// manifest in the catalog, and checkpoints that extend one another list the same chunks
// (10,000 manifests of 64 entries may hold 64 distinct ones). Entries are kept with their
// encoding; an entry encoded byte for byte like one already here is that entry. Two different
// entries for one chunk id (a damaged or conflicting manifest) are both kept, under different
// indices. Not thread-safe.
class ChunkEntryTable {
 public:
  size_t size() const { return entries_.size(); }
  const ManifestChunk& entry(uint32_t index) const { return entries_[index]; }

  // DecodeManifestShared's steps: the index of the entry encoded as `encoded` (the whole
  // encoded entry, chunk id first), trying first the one the last remembered manifest had at
  // `position`; adding a decoded entry; remembering a manifest's indices.
  std::optional<uint32_t> Find(absl::string_view encoded, size_t position) const;
  uint32_t Add(ManifestChunk entry, absl::string_view encoded);
  void Remember(const std::vector<uint32_t>& refs);

 private:
  std::vector<ManifestChunk> entries_;
  std::vector<std::string> encoded_;
  absl::flat_hash_map<uint64_t, std::vector<uint32_t>> by_id_;
  std::vector<uint32_t> last_refs_;
};

// Decodes a manifest with exactly DecodeManifest's checks and errors, but leaves `chunks`
// empty: each chunk entry goes to `table` (decoded only if no identical entry is there) and
// its index to `*chunk_refs`, in the manifest's order. With `keep_tokens` false the tokens are
// checked against depth and hash but not copied (`tokens` stays empty).
absl::StatusOr<Manifest> DecodeManifestShared(absl::string_view bytes, bool keep_tokens,
                                              ChunkEntryTable* table,
                                              std::vector<uint32_t>* chunk_refs);

uint64_t TokenHash(const std::vector<uint32_t>& tokens);
uint64_t CompatHash(absl::string_view compat_digest);
// True if `name` is 1..kMaxFileName characters of [A-Za-z0-9._-] not starting with '.'.
bool ValidFileName(absl::string_view name);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_DISK_FORMAT_H_
