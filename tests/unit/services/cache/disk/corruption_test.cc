// B1 (CI subset): corruption of chunk and state files is detected at restore, every dependent
// checkpoint is quarantined, unrelated checkpoints keep working, and clean loads never fail
// (docs/reliability.md P11, R4, R5, §5.2 B1). More offsets: CAIRN_CORRUPTION_OFFSETS=n.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "gtest/gtest.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "services/cache/disk/testing/rocksdb_fault_fs.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::RestoreAll;
using ::cairn::cache::testing::TempDir;
using ::cairn::testing::StatusIs;

constexpr uint32_t kRows = 16;
constexpr uint64_t kRowBytes = 256;         // 4 KiB chunks: every offset class is cheap to visit.
constexpr uint64_t kA = 1, kB = 2, kC = 3;  // B shares A's first two chunks; C is unrelated.

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Open(pristine_.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Publish(factory_.Build(kA, {}, 4)).ok());
    const auto& a = factory_.ChunksOf(kA);
    ASSERT_TRUE(store->Publish(factory_.Build(kB, {a[0], a[1]}, 2)).ok());
    ASSERT_TRUE(store->Publish(factory_.Build(kC, {}, 1)).ok());
    auto ma = store->GetManifest(kA);
    auto mc = store->GetManifest(kC);
    ASSERT_TRUE(ma.ok() && mc.ok());
    shared_chunk_ = "chunks/" + ma->chunks[0].file.name;
    other_a_chunk_ = "chunks/" + ma->chunks[3].file.name;
    c_chunk_ = "chunks/" + mc->chunks[0].file.name;
    a_state_ = "states/" + ma->state_file.name;
  }

  // Opens the tier through a FaultFileSystem that only simulates fsyncs: detection does not
  // depend on durability, and real fsyncs would make hundreds of trials slow on busy disks.
  std::unique_ptr<DiskStore> Open(const std::string& root) {
    DiskStoreOptions o;
    o.root = root;
    o.free_space_reserve_bytes = 0;
    faults_.push_back(std::make_unique<FaultFileSystem>(PosixFileSystem()));
    o.catalog_fs = NewRocksDbFaultFs(faults_.back().get());
    auto store = DiskStore::Create(o, faults_.back().get());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Copies the pristine tier, applies `corrupt` to the copy's file `rel`, restores
  // `victim`, and checks detection and quarantine of `dependents`; C must still restore.
  void ExpectDetected(const std::string& rel, const std::function<void(std::string*)>& corrupt,
                      uint64_t victim, const std::vector<uint64_t>& dependents,
                      const std::string& label) {
    TempDir copy;
    std::filesystem::copy(pristine_.path(), copy.path(),
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing);
    const std::string path = copy.path() + "/" + rel;
    std::string bytes = ReadFile(path);
    corrupt(&bytes);
    WriteFile(path, bytes);
    auto store = Open(copy.path());
    ASSERT_NE(store, nullptr) << label;
    ++trials_;

    auto restored = store->HasCheckpoint(victim)
                        ? RestoreAll(store.get(), victim)
                        : absl::StatusOr<std::vector<uint8_t>>(absl::NotFoundError("gone"));

    // Detected at start-up (size) or at restore (checksum, identity): never served.
    ASSERT_FALSE(restored.ok()) << label << ": corruption not detected";
    if (restored.status().code() != absl::StatusCode::kNotFound) {
      EXPECT_THAT(restored.status(), StatusIs(absl::StatusCode::kDataLoss)) << label;
    }
    for (uint64_t id : dependents) {
      EXPECT_FALSE(store->HasCheckpoint(id)) << label << ": dependent " << id << " still served";
    }
    EXPECT_EQ(store->Quarantined().size(), dependents.size()) << label;
    auto c = RestoreAll(store.get(), kC);
    ASSERT_TRUE(c.ok()) << label << ": " << c.status();
    EXPECT_EQ(*c, factory_.Expected(kC)) << label;
  }

  int Offsets() const {
    const char* v = std::getenv("CAIRN_CORRUPTION_OFFSETS");
    int n = 100;
    if (v != nullptr && !absl::SimpleAtoi(v, &n)) n = 100;
    return n;
  }

  std::vector<std::unique_ptr<FaultFileSystem>> faults_;  // Outlive the stores below.
  TempDir pristine_;
  CheckpointFactory factory_{kRows, kRowBytes};
  std::string shared_chunk_, other_a_chunk_, c_chunk_, a_state_;
  int trials_ = 0;
};

TEST_F(CorruptionTest, BitFlipsAnywhereInASharedChunkQuarantineEveryDependent) {
  const uint64_t size = std::filesystem::file_size(pristine_.path() + "/" + shared_chunk_);
  std::mt19937_64 rng(1);
  for (int bits : {1, 2, 8}) {
    for (int i = 0; i < Offsets(); ++i) {
      const uint64_t offset = (i == 0) ? 0 : (i == 1) ? size - 1 : rng() % size;
      ExpectDetected(
          shared_chunk_,
          [&](std::string* b) {
            for (int k = 0; k < bits; ++k) (*b)[(offset + k) % size] ^= static_cast<char>(1 << k);
          },
          kB, {kA, kB}, absl::StrCat(bits, " bits at ", offset));
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(trials_, 3 * Offsets());
}

TEST_F(CorruptionTest, StructuralDamageIsDetected) {
  const std::vector<std::pair<std::string, std::function<void(std::string*)>>> cases = {
      {"truncate to 0", [](std::string* b) { b->clear(); }},
      {"truncate by 1", [](std::string* b) { b->pop_back(); }},
      {"truncate to the header", [](std::string* b) { b->resize(40); }},
      {"zero a 4 KiB page",
       [](std::string* b) {
         std::fill(b->begin(), b->begin() + std::min<size_t>(b->size(), 4096), '\0');
       }},
      {"append garbage", [](std::string* b) { b->append("garbage!"); }},
  };
  for (const auto& [name, corrupt] : cases) {
    ExpectDetected(shared_chunk_, corrupt, kA, {kA, kB}, "chunk: " + name);
    ExpectDetected(a_state_, corrupt, kA, {kA}, "state: " + name);
    if (HasFatalFailure()) return;
  }
}

TEST_F(CorruptionTest, SwappedMisplacedAndMislabelledChunksAreDetected) {
  const std::string other = ReadFile(pristine_.path() + "/" + other_a_chunk_);
  const std::string from_c = ReadFile(pristine_.path() + "/" + c_chunk_);
  const std::string shared = ReadFile(pristine_.path() + "/" + shared_chunk_);
  ASSERT_EQ(other.size(), shared.size());

  // Another chunk of the same checkpoint in this chunk's place (a swap, one side).
  ExpectDetected(
      shared_chunk_, [&](std::string* b) { *b = other; }, kA, {kA, kB}, "swap");
  // A chunk copied in from another checkpoint.
  ExpectDetected(
      shared_chunk_, [&](std::string* b) { *b = from_c; }, kA, {kA, kB}, "copy");
  // A self-consistent file (valid checksum) carrying the wrong identity: right bytes, wrong
  // first row.
  ExpectDetected(
      shared_chunk_,
      [&](std::string* b) {
        auto header = EncodeChunkHeader(CompatHash("compat-test-v1"),
                                        ChunkIdentity{1, 0, 5 * kRows, kRows, kRowBytes});
        ASSERT_TRUE(header.ok());
        const std::string payload = b->substr(header->size(), kRows * kRowBytes);
        Xxh3Stream h;
        h.Update(*header);
        h.Update(payload);
        *b = *header + payload + EncodeFooter(h.Digest());
      },
      kA, {kA, kB}, "wrong identity, valid checksum");
}

TEST_F(CorruptionTest, CleanLoadsNeverFail) {
  auto store = Open(pristine_.path());
  ASSERT_NE(store, nullptr);
  int failures = 0;

  for (int i = 0; i < 1000; ++i) {
    const uint64_t id = 1 + i % 3;
    auto bytes = RestoreAll(store.get(), id);
    if (!bytes.ok() || *bytes != factory_.Expected(id)) ++failures;
  }

  EXPECT_EQ(failures, 0);
  EXPECT_TRUE(store->Quarantined().empty());
}

TEST_F(CorruptionTest, GarbledCatalogIsRebuiltFromManifests) {
  for (const auto& e : std::filesystem::directory_iterator(pristine_.path() + "/catalog")) {
    if (e.path().extension() == ".log" || e.path().filename().string().rfind("MANIFEST", 0) == 0) {
      std::string bytes = ReadFile(e.path().string());
      for (size_t i = 0; i < bytes.size(); i += 7) bytes[i] = static_cast<char>(~bytes[i]);
      WriteFile(e.path().string(), bytes);
    }
  }

  auto store = Open(pristine_.path());

  ASSERT_NE(store, nullptr);
  for (uint64_t id : {kA, kB, kC}) {
    auto bytes = RestoreAll(store.get(), id);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, factory_.Expected(id));
  }
  CAIRN_EXPECT_OK(store->catalog().VerifyChecksums());
}

}  // namespace
}  // namespace cairn::cache
