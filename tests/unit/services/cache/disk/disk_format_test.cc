// File formats: round trips, checksums over identity and payload, bounded parsing
// (docs/reliability.md P10-P13).

#include "services/cache/disk/disk_format.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/checksum/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

Manifest SampleManifest() {
  Manifest m;
  m.checkpoint_id = 42;
  m.generation = 7;
  m.tokens = {1, 2, 3, 4, 5};
  m.depth = m.tokens.size();
  m.token_hash = TokenHash(m.tokens);
  m.compat_digest = "compat";
  m.input_digest = "input";
  m.state_file = {"s-1.state", 1000, 0xabc};
  m.sections = {{0, SectionKind::kTail, 256, 5, 500}, {1, SectionKind::kPrivate, 0, 0, 484}};
  m.chunks = {{{9, 0, 0, 256, 64}, {"c-9.chunk", 16440, 0xdef}}};
  m.capture_kind = 3;
  return m;
}

TEST(DiskFormatTest, ManifestRoundTrips) {
  const Manifest m = SampleManifest();

  auto decoded = DecodeManifest(EncodeManifest(m));

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, m);
}

TEST(DiskFormatTest, VersionOneManifestsStillLoadWithThePromptEndKind) {
  Manifest m = SampleManifest();

  auto decoded = DecodeManifest(EncodeManifestV1ForTest(m));

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->capture_kind, 0u);
  m.capture_kind = 0;
  EXPECT_EQ(*decoded, m);
}

TEST(DiskFormatTest, EveryByteOfAManifestIsCovered) {
  const std::string bytes = EncodeManifest(SampleManifest());

  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x10;
    EXPECT_THAT(DecodeManifest(flipped).status(), StatusIs(absl::StatusCode::kDataLoss))
        << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THAT(DecodeManifest(bytes.substr(0, n)).status(), StatusIs(absl::StatusCode::kDataLoss))
        << "prefix " << n;
  }
}

// DecodeManifestShared: each chunk entry decoded once into a table shared by many manifests
// (start-up), with exactly DecodeManifest's checks.
Manifest WithChunks(Manifest m, const ChunkEntryTable& table, const std::vector<uint32_t>& refs) {
  for (uint32_t ref : refs) m.chunks.push_back(table.entry(ref));
  return m;
}

TEST(DiskFormatTest, SharedDecodingGivesTheSameManifestsAndKeepsEachEntryOnce) {
  Manifest a = SampleManifest();
  a.chunks.push_back({{10, 0, 256, 256, 64}, {"c-a.chunk", 16440, 0x123}});
  Manifest b = a;  // Extends a: its chunks, then one of its own.
  b.checkpoint_id = 43;
  b.chunks.push_back({{11, 0, 512, 256, 64}, {"c-b.chunk", 16440, 0x456}});
  Manifest c = a;  // Lists chunk 10 in another order, with the same entries.
  c.checkpoint_id = 44;
  std::swap(c.chunks[0], c.chunks[1]);
  ChunkEntryTable table;
  std::vector<uint32_t> refs;

  for (const Manifest& m : {a, b, c, a}) {
    auto decoded = DecodeManifestShared(EncodeManifest(m), /*keep_tokens=*/true, &table, &refs);

    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(decoded->chunks.empty());
    EXPECT_EQ(WithChunks(*decoded, table, refs), m);
  }
  EXPECT_EQ(table.size(), 3u);  // Chunks 9, 10 and 11, once each.
}

TEST(DiskFormatTest, SharedDecodingKeepsTwoDifferentEntriesForOneChunkApart) {
  Manifest a = SampleManifest();
  Manifest b = a;
  b.checkpoint_id = 43;
  b.chunks[0].file.checksum ^= 1;  // The same chunk id, listed differently.
  ChunkEntryTable table;
  std::vector<uint32_t> refs_a, refs_b;

  ASSERT_TRUE(DecodeManifestShared(EncodeManifest(a), true, &table, &refs_a).ok());
  auto decoded_b = DecodeManifestShared(EncodeManifest(b), true, &table, &refs_b);

  ASSERT_TRUE(decoded_b.ok()) << decoded_b.status();
  EXPECT_NE(refs_a, refs_b);
  EXPECT_EQ(table.entry(refs_a[0]), a.chunks[0]);
  EXPECT_EQ(table.entry(refs_b[0]), b.chunks[0]);
}

TEST(DiskFormatTest, SharedDecodingChecksEveryByteEvenOfEntriesItKnows) {
  const Manifest m = SampleManifest();
  const std::string bytes = EncodeManifest(m);
  ChunkEntryTable table;
  std::vector<uint32_t> refs;
  ASSERT_TRUE(DecodeManifestShared(bytes, true, &table, &refs).ok());

  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x10;
    EXPECT_THAT(DecodeManifestShared(flipped, true, &table, &refs).status(),
                StatusIs(absl::StatusCode::kDataLoss))
        << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THAT(DecodeManifestShared(bytes.substr(0, n), false, &table, &refs).status(),
                StatusIs(absl::StatusCode::kDataLoss))
        << "prefix " << n;
  }
}

TEST(DiskFormatTest, SharedDecodingWithoutTokensStillChecksThem) {
  Manifest m = SampleManifest();
  ChunkEntryTable table;
  std::vector<uint32_t> refs;

  auto decoded = DecodeManifestShared(EncodeManifest(m), /*keep_tokens=*/false, &table, &refs);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->tokens.empty());
  EXPECT_EQ(decoded->depth, m.tokens.size());
  EXPECT_EQ(decoded->token_hash, m.token_hash);
  m.token_hash ^= 1;  // A manifest whose tokens do not match their hash is corrupt either way.
  EXPECT_THAT(DecodeManifestShared(EncodeManifest(m), false, &table, &refs).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DiskFormatTest, HugeCountsAreRejectedBeforeAllocating) {
  std::string bytes = EncodeManifest(SampleManifest());
  // The token count sits after magic, version, kind, id, generation, depth and two strings.
  const size_t token_count_at = 8 + 4 + 4 + 8 + 8 + 8 + (4 + 6) + (4 + 5);
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(bytes.data() + token_count_at, &huge, sizeof(huge));
  // Re-seal the trailing checksum so that only the bound can reject it.
  const uint64_t sum = Xxh3(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof(sum));

  absl::Status s = DecodeManifest(bytes).status();

  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("out of bounds"));
}

TEST(DiskFormatTest, ChunkHeaderRoundTripsAndChecksItsSize) {
  const ChunkIdentity id{5, 2, 512, 256, 128};

  auto header = EncodeChunkHeader(77, id);

  ASSERT_TRUE(header.ok()) << header.status();
  auto decoded = DecodeFileHeader(*header);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->kind, FileKind::kChunk);
  EXPECT_EQ(decoded->chunk, id);
  EXPECT_EQ(decoded->compat_hash, 77u);
  EXPECT_EQ(decoded->payload_bytes, 256u * 128u);
  EXPECT_THAT(EncodeChunkHeader(1, ChunkIdentity{1, 0, 0, 0xffffffff, uint64_t{1} << 40}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DiskFormatTest, StateHeaderRoundTripsAndRejectsDamage) {
  const StateIdentity id{3, 600, {{0, SectionKind::kTail, 512, 88, 880}}};
  auto header = EncodeStateHeader(1, id);
  ASSERT_TRUE(header.ok());

  auto decoded = DecodeFileHeader(*header);

  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->state, id);
  std::string bad_kind = *header;
  bad_kind[kFileFixedHeaderBytes + 16 + 8 + 4] = 9;  // First section's kind.
  EXPECT_THAT(DecodeFileHeader(bad_kind).status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeFileHeader(header->substr(0, header->size() - 1)).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(PeekHeaderBytes(std::string(40, 'x')).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DiskFormatTest, FooterChecksItsMagic) {
  auto ok = DecodeFooter(EncodeFooter(123));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 123u);
  std::string bad = EncodeFooter(123);
  bad[12] ^= 1;

  EXPECT_THAT(DecodeFooter(bad).status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DiskFormatTest, FileNamesAreRestricted) {
  EXPECT_TRUE(ValidFileName("c-0001-ab.chunk"));
  for (const char* bad : {"", ".hidden", "../etc/passwd", "a/b", "a b", "x\n"}) {
    EXPECT_FALSE(ValidFileName(bad)) << bad;
  }
  EXPECT_FALSE(ValidFileName(std::string(FormatLimits::kMaxFileName + 1, 'a')));
}

}  // namespace
}  // namespace cairn::cache
