#include "services/cache/disk/disk_format.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/status/status_macros.h"

namespace cairn::cache {
namespace {

constexpr uint64_t kChunkMagic = 0x314b4843'4e524941;     // "AIRNCHK1" little-endian.
constexpr uint64_t kStateMagic = 0x31545353'4e524941;     // "AIRNSST1".
constexpr uint64_t kManifestMagic = 0x31464e4d'4e524941;  // "AIRNMNF1".
constexpr uint64_t kFooterMagic = 0x31444e45'4e524941;    // "AIRNEND1".

class Encoder {
 public:
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Bounded reader: every read checks the remaining length; errors are DataLoss.
class Decoder {
 public:
  explicit Decoder(absl::string_view in) : in_(in) {}

  absl::StatusOr<uint32_t> U32() {
    uint32_t v = 0;
    RETURN_IF_ERROR(Raw(&v, sizeof(v)));
    return v;
  }
  absl::StatusOr<uint64_t> U64() {
    uint64_t v = 0;
    RETURN_IF_ERROR(Raw(&v, sizeof(v)));
    return v;
  }
  absl::StatusOr<std::string> Str(uint64_t max) {
    ASSIGN_OR_RETURN(uint32_t n, U32());
    if (n > max || n > in_.size()) return Corrupt(absl::StrCat("string of ", n, " bytes"));
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  absl::Status Raw(void* p, size_t n) {
    if (in_.size() < n) return Corrupt("truncated record");
    if (n > 0) std::memcpy(p, in_.data(), n);  // `p` may be null for an empty vector.
    in_.remove_prefix(n);
    return absl::OkStatus();
  }
  // Returns a count after checking count * element_bytes fits in what is left.
  absl::StatusOr<uint64_t> Count(uint64_t max, uint64_t element_bytes) {
    ASSIGN_OR_RETURN(uint64_t n, U64());
    if (n > max || (element_bytes != 0 && n > in_.size() / element_bytes)) {
      return Corrupt(absl::StrCat("count ", n, " out of bounds"));
    }
    return n;
  }
  size_t remaining() const { return in_.size(); }
  // What is left to read, without consuming it.
  absl::string_view rest() const { return in_; }
  void Skip(size_t n) { in_.remove_prefix(std::min(n, in_.size())); }
  static absl::Status Corrupt(absl::string_view what) {
    return absl::DataLossError(absl::StrCat("corrupt disk-tier record: ", what));
  }

 private:
  absl::string_view in_;
};

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

void EncodeChunkIdentity(const ChunkIdentity& id, Encoder* e) {
  e->U64(id.chunk_id);
  e->U32(id.component_id);
  e->U64(id.first_row);
  e->U32(id.rows);
  e->U64(id.row_bytes);
}

absl::StatusOr<ChunkIdentity> DecodeChunkIdentity(Decoder* d) {
  ChunkIdentity id;
  ASSIGN_OR_RETURN(id.chunk_id, d->U64());
  ASSIGN_OR_RETURN(id.component_id, d->U32());
  ASSIGN_OR_RETURN(id.first_row, d->U64());
  ASSIGN_OR_RETURN(id.rows, d->U32());
  ASSIGN_OR_RETURN(id.row_bytes, d->U64());
  uint64_t bytes;
  if (MulOverflows(id.rows, id.row_bytes, &bytes) || bytes > FormatLimits::kMaxPayloadBytes) {
    return Decoder::Corrupt("chunk rows x row bytes overflow");
  }
  return id;
}

void EncodeSections(const std::vector<StateSection>& sections, Encoder* e) {
  e->U64(sections.size());
  for (const StateSection& s : sections) {
    e->U32(s.component_id);
    e->U32(static_cast<uint32_t>(s.kind));
    e->U64(s.first_row);
    e->U32(s.rows);
    e->U64(s.bytes);
  }
}

constexpr uint64_t kSectionBytes = 28;

absl::StatusOr<std::vector<StateSection>> DecodeSections(Decoder* d, uint64_t* total) {
  ASSIGN_OR_RETURN(uint64_t n, d->Count(FormatLimits::kMaxSections, kSectionBytes));
  std::vector<StateSection> sections(n);
  *total = 0;
  for (StateSection& s : sections) {
    ASSIGN_OR_RETURN(s.component_id, d->U32());
    ASSIGN_OR_RETURN(uint32_t kind, d->U32());
    if (kind != static_cast<uint32_t>(SectionKind::kPrivate) &&
        kind != static_cast<uint32_t>(SectionKind::kTail)) {
      return Decoder::Corrupt(absl::StrCat("section kind ", kind));
    }
    s.kind = static_cast<SectionKind>(kind);
    ASSIGN_OR_RETURN(s.first_row, d->U64());
    ASSIGN_OR_RETURN(s.rows, d->U32());
    ASSIGN_OR_RETURN(s.bytes, d->U64());
    if (s.bytes > FormatLimits::kMaxPayloadBytes - *total) {
      return Decoder::Corrupt("state sections overflow");
    }
    *total += s.bytes;
  }
  return sections;
}

std::string FixedPrefix(uint64_t magic, FileKind kind, uint64_t payload, uint64_t compat_hash) {
  Encoder e;
  e.U64(magic);
  e.U32(kDiskFormatVersion);
  e.U32(static_cast<uint32_t>(kind));
  e.U32(0);  // header_bytes, patched by Finish.
  e.U32(0);
  e.U64(payload);
  e.U64(compat_hash);
  return std::move(e.out());
}

std::string FinishHeader(std::string header) {
  const uint32_t n = static_cast<uint32_t>(header.size());
  for (int i = 0; i < 4; ++i) header[16 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return header;
}

}  // namespace

absl::StatusOr<std::string> EncodeChunkHeader(uint64_t compat_hash, const ChunkIdentity& id) {
  uint64_t payload;
  if (MulOverflows(id.rows, id.row_bytes, &payload) || payload > FormatLimits::kMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", id.chunk_id, " rows ", id.rows, " x row bytes ", id.row_bytes, " out of bounds"));
  }
  Encoder e;
  e.out() = FixedPrefix(kChunkMagic, FileKind::kChunk, payload, compat_hash);
  EncodeChunkIdentity(id, &e);
  return FinishHeader(std::move(e.out()));
}

absl::StatusOr<std::string> EncodeStateHeader(uint64_t compat_hash, const StateIdentity& id) {
  if (id.sections.size() > FormatLimits::kMaxSections) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", id.checkpoint_id, " has ",
                                                   id.sections.size(), " state sections"));
  }
  uint64_t payload = 0;
  for (const StateSection& s : id.sections) {
    if (s.bytes > FormatLimits::kMaxPayloadBytes - payload) {
      return absl::InvalidArgumentError("state sections overflow");
    }
    payload += s.bytes;
  }
  Encoder e;
  e.out() = FixedPrefix(kStateMagic, FileKind::kState, payload, compat_hash);
  e.U64(id.checkpoint_id);
  e.U64(id.depth);
  EncodeSections(id.sections, &e);
  return FinishHeader(std::move(e.out()));
}

absl::StatusOr<uint64_t> PeekHeaderBytes(absl::string_view prefix) {
  Decoder d(prefix);
  ASSIGN_OR_RETURN(uint64_t magic, d.U64());
  if (magic != kChunkMagic && magic != kStateMagic) return Decoder::Corrupt("bad file magic");
  ASSIGN_OR_RETURN(uint32_t version, d.U32());
  if (version != kDiskFormatVersion) {
    return Decoder::Corrupt(absl::StrCat("format version ", version));
  }
  ASSIGN_OR_RETURN(uint32_t kind, d.U32());
  (void)kind;
  ASSIGN_OR_RETURN(uint32_t header_bytes, d.U32());
  if (header_bytes < kFileFixedHeaderBytes || header_bytes > FormatLimits::kMaxHeaderBytes) {
    return Decoder::Corrupt(absl::StrCat("header of ", header_bytes, " bytes"));
  }
  return header_bytes;
}

absl::StatusOr<FileHeader> DecodeFileHeader(absl::string_view header) {
  ASSIGN_OR_RETURN(uint64_t header_bytes, PeekHeaderBytes(header));
  if (header_bytes != header.size()) return Decoder::Corrupt("header length mismatch");
  Decoder d(header);
  FileHeader h;
  h.header_bytes = header_bytes;
  ASSIGN_OR_RETURN(uint64_t magic, d.U64());
  ASSIGN_OR_RETURN(uint32_t version, d.U32());
  (void)version;
  ASSIGN_OR_RETURN(uint32_t kind, d.U32());
  ASSIGN_OR_RETURN(uint32_t unused_header_bytes, d.U32());
  ASSIGN_OR_RETURN(uint32_t reserved, d.U32());
  (void)unused_header_bytes, (void)reserved;
  ASSIGN_OR_RETURN(h.payload_bytes, d.U64());
  ASSIGN_OR_RETURN(h.compat_hash, d.U64());
  if (h.payload_bytes > FormatLimits::kMaxPayloadBytes) return Decoder::Corrupt("payload size");
  if (magic == kChunkMagic && kind == static_cast<uint32_t>(FileKind::kChunk)) {
    h.kind = FileKind::kChunk;
    ASSIGN_OR_RETURN(h.chunk, DecodeChunkIdentity(&d));
    if (uint64_t{h.chunk.rows} * h.chunk.row_bytes != h.payload_bytes) {
      return Decoder::Corrupt("chunk payload size does not match its rows");
    }
  } else if (magic == kStateMagic && kind == static_cast<uint32_t>(FileKind::kState)) {
    h.kind = FileKind::kState;
    ASSIGN_OR_RETURN(h.state.checkpoint_id, d.U64());
    ASSIGN_OR_RETURN(h.state.depth, d.U64());
    uint64_t total = 0;
    ASSIGN_OR_RETURN(h.state.sections, DecodeSections(&d, &total));
    if (total != h.payload_bytes) return Decoder::Corrupt("state payload size mismatch");
  } else {
    return Decoder::Corrupt(absl::StrCat("file kind ", kind));
  }
  if (d.remaining() != 0) return Decoder::Corrupt("trailing header bytes");
  return h;
}

std::string EncodeFooter(uint64_t checksum) {
  Encoder e;
  e.U64(checksum);
  e.U64(kFooterMagic);
  return std::move(e.out());
}

absl::StatusOr<uint64_t> DecodeFooter(absl::string_view footer) {
  if (footer.size() != kFileFooterBytes) return Decoder::Corrupt("footer length");
  Decoder d(footer);
  ASSIGN_OR_RETURN(uint64_t checksum, d.U64());
  ASSIGN_OR_RETURN(uint64_t magic, d.U64());
  if (magic != kFooterMagic) return Decoder::Corrupt("bad footer magic");
  return checksum;
}

namespace {

void EncodeManifestFile(const ManifestFile& f, Encoder* e) {
  e->Str(f.name);
  e->U64(f.length);
  e->U64(f.checksum);
}

absl::StatusOr<ManifestFile> DecodeManifestFile(Decoder* d) {
  ManifestFile f;
  ASSIGN_OR_RETURN(f.name, d->Str(FormatLimits::kMaxFileName));
  if (!ValidFileName(f.name)) return Decoder::Corrupt("bad file name in manifest");
  ASSIGN_OR_RETURN(f.length, d->U64());
  ASSIGN_OR_RETURN(f.checksum, d->U64());
  return f;
}

// Smallest encoding of one manifest chunk entry (for the count bound).
constexpr uint64_t kMinChunkEntryBytes = 32 + 4 + 1 + 16;

}  // namespace

namespace {

std::string EncodeManifestVersion(const Manifest& m, uint32_t version) {
  Encoder e;
  e.U64(kManifestMagic);
  e.U32(version);
  e.U32(static_cast<uint32_t>(FileKind::kManifest));
  e.U64(m.checkpoint_id);
  e.U64(m.generation);
  e.U64(m.depth);
  e.Str(m.compat_digest);
  e.Str(m.input_digest);
  e.U64(m.tokens.size());
  e.Raw(m.tokens.data(), m.tokens.size() * sizeof(uint32_t));
  e.U64(m.token_hash);
  EncodeManifestFile(m.state_file, &e);
  EncodeSections(m.sections, &e);
  e.U64(m.chunks.size());
  for (const ManifestChunk& c : m.chunks) {
    EncodeChunkIdentity(c.id, &e);
    EncodeManifestFile(c.file, &e);
  }
  if (version >= 2) e.U32(m.capture_kind);
  const uint64_t checksum = Xxh3(e.out());
  e.U64(checksum);
  return std::move(e.out());
}

}  // namespace

std::string EncodeManifest(const Manifest& m) {
  return EncodeManifestVersion(m, kManifestFormatVersion);
}

std::string EncodeManifestV1ForTest(const Manifest& m) {
  Manifest v1 = m;
  v1.capture_kind = 0;
  return EncodeManifestVersion(v1, 1);
}

namespace {

// Encoded bytes of the chunk entry at the front of `rest` (identity, then the file's name,
// length and checksum), or an empty view if `rest` is too short to hold one.
absl::string_view EncodedChunkEntry(absl::string_view rest) {
  constexpr size_t kIdentityBytes = 32;
  if (rest.size() < kIdentityBytes + 4) return {};
  uint32_t name_bytes;
  std::memcpy(&name_bytes, rest.data() + kIdentityBytes, sizeof(name_bytes));
  if (name_bytes > FormatLimits::kMaxFileName) return {};
  const size_t n = kIdentityBytes + 4 + name_bytes + 16;
  return n <= rest.size() ? rest.substr(0, n) : absl::string_view();
}

// DecodeManifest, and DecodeManifestShared when `table` is set (then `refs` receives the
// chunk entries' indices and `m.chunks` stays empty). `keep_tokens` false checks the tokens'
// hash on the encoded bytes and leaves `m.tokens` empty.
absl::StatusOr<Manifest> DecodeManifestImpl(absl::string_view bytes, ChunkEntryTable* table,
                                            std::vector<uint32_t>* refs, bool keep_tokens) {
  if (bytes.size() < 8 + 24 || bytes.size() > FormatLimits::kMaxManifestBytes) {
    return Decoder::Corrupt(absl::StrCat("manifest of ", bytes.size(), " bytes"));
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof(stored));
  if (Xxh3(body) != stored) return Decoder::Corrupt("manifest checksum mismatch");
  Decoder d(body);
  ASSIGN_OR_RETURN(uint64_t magic, d.U64());
  ASSIGN_OR_RETURN(uint32_t version, d.U32());
  ASSIGN_OR_RETURN(uint32_t kind, d.U32());
  if (magic != kManifestMagic || version < 1 || version > kManifestFormatVersion ||
      kind != static_cast<uint32_t>(FileKind::kManifest)) {
    return Decoder::Corrupt("bad manifest magic, version or kind");
  }
  Manifest m;
  ASSIGN_OR_RETURN(m.checkpoint_id, d.U64());
  ASSIGN_OR_RETURN(m.generation, d.U64());
  ASSIGN_OR_RETURN(m.depth, d.U64());
  ASSIGN_OR_RETURN(m.compat_digest, d.Str(FormatLimits::kMaxString));
  ASSIGN_OR_RETURN(m.input_digest, d.Str(FormatLimits::kMaxString));
  ASSIGN_OR_RETURN(uint64_t n_tokens, d.Count(FormatLimits::kMaxTokens, sizeof(uint32_t)));
  const absl::string_view token_bytes = d.rest().substr(0, n_tokens * sizeof(uint32_t));
  if (keep_tokens) {
    m.tokens.resize(n_tokens);
    RETURN_IF_ERROR(d.Raw(m.tokens.data(), n_tokens * sizeof(uint32_t)));
  } else {
    d.Skip(token_bytes.size());  // Count() checked they are there.
  }
  ASSIGN_OR_RETURN(m.token_hash, d.U64());
  if (m.depth != n_tokens || m.token_hash != Xxh3(token_bytes)) {
    return Decoder::Corrupt("manifest tokens do not match depth or hash");
  }
  ASSIGN_OR_RETURN(m.state_file, DecodeManifestFile(&d));
  uint64_t total = 0;
  ASSIGN_OR_RETURN(m.sections, DecodeSections(&d, &total));
  ASSIGN_OR_RETURN(uint64_t n_chunks, d.Count(FormatLimits::kMaxChunks, kMinChunkEntryBytes));
  if (table == nullptr) {
    m.chunks.resize(n_chunks);
    for (ManifestChunk& c : m.chunks) {
      ASSIGN_OR_RETURN(c.id, DecodeChunkIdentity(&d));
      ASSIGN_OR_RETURN(c.file, DecodeManifestFile(&d));
    }
  } else {
    refs->clear();
    refs->reserve(n_chunks);
    for (uint64_t i = 0; i < n_chunks; ++i) {
      // An entry encoded byte for byte like one already in the table is that entry: the
      // same bytes passed the same checks when it was decoded.
      const absl::string_view encoded = EncodedChunkEntry(d.rest());
      if (std::optional<uint32_t> known = table->Find(encoded, i); known.has_value()) {
        refs->push_back(*known);
        d.Skip(encoded.size());
        continue;
      }
      ManifestChunk c;
      ASSIGN_OR_RETURN(c.id, DecodeChunkIdentity(&d));
      ASSIGN_OR_RETURN(c.file, DecodeManifestFile(&d));
      refs->push_back(table->Add(std::move(c), encoded));
    }
    table->Remember(*refs);
  }
  if (version >= 2) {
    ASSIGN_OR_RETURN(m.capture_kind, d.U32());
    if (m.capture_kind > FormatLimits::kMaxCaptureKind) {
      return Decoder::Corrupt(absl::StrCat("capture kind ", m.capture_kind));
    }
  }
  if (d.remaining() != 0) return Decoder::Corrupt("trailing manifest bytes");
  return m;
}

}  // namespace

absl::StatusOr<Manifest> DecodeManifest(absl::string_view bytes) {
  return DecodeManifestImpl(bytes, nullptr, nullptr, /*keep_tokens=*/true);
}

absl::StatusOr<Manifest> DecodeManifestShared(absl::string_view bytes, bool keep_tokens,
                                              ChunkEntryTable* table,
                                              std::vector<uint32_t>* chunk_refs) {
  return DecodeManifestImpl(bytes, table, chunk_refs, keep_tokens);
}

std::optional<uint32_t> ChunkEntryTable::Find(absl::string_view encoded, size_t position) const {
  if (encoded.size() < sizeof(uint64_t)) return std::nullopt;
  // Manifests that share chunks list them in the same order: try the entry the previous
  // manifest had at this position first.
  if (position < last_refs_.size() && encoded_[last_refs_[position]] == encoded) {
    return last_refs_[position];
  }
  uint64_t chunk_id;
  std::memcpy(&chunk_id, encoded.data(), sizeof(chunk_id));
  auto it = by_id_.find(chunk_id);
  if (it == by_id_.end()) return std::nullopt;
  for (uint32_t index : it->second) {
    if (encoded_[index] == encoded) return index;
  }
  return std::nullopt;
}

uint32_t ChunkEntryTable::Add(ManifestChunk entry, absl::string_view encoded) {
  const uint32_t index = static_cast<uint32_t>(entries_.size());
  by_id_[entry.id.chunk_id].push_back(index);
  entries_.push_back(std::move(entry));
  encoded_.emplace_back(encoded);
  return index;
}

void ChunkEntryTable::Remember(const std::vector<uint32_t>& refs) { last_refs_ = refs; }

uint64_t TokenHash(const std::vector<uint32_t>& tokens) {
  return Xxh3(tokens.data(), tokens.size() * sizeof(uint32_t));
}

uint64_t CompatHash(absl::string_view compat_digest) { return Xxh3(compat_digest); }

namespace {

// The characters ValidFileName allows, as a table: start-up checks every name of every
// manifest, several hundred thousand of them with 10,000 checkpoints.
constexpr std::array<bool, 256> FileNameCharacters() {
  std::array<bool, 256> ok{};
  for (int c = 'a'; c <= 'z'; ++c) ok[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) ok[c] = true;
  for (int c = '0'; c <= '9'; ++c) ok[c] = true;
  ok['.'] = ok['_'] = ok['-'] = true;
  return ok;
}
constexpr std::array<bool, 256> kFileNameCharacters = FileNameCharacters();

}  // namespace

bool ValidFileName(absl::string_view name) {
  if (name.empty() || name.size() > FormatLimits::kMaxFileName || name[0] == '.') return false;
  bool ok = true;
  for (char c : name) ok &= kFileNameCharacters[static_cast<uint8_t>(c)];
  return ok;
}

}  // namespace cairn::cache
