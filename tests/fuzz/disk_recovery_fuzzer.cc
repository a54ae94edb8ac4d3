// The disk tier's start-up over damaged state (docs/disk-format.md "Start-up and restore"):
// catalog records (RocksDB values holding manifests), manifests, chunk and state files
// written, truncated, flipped, copied over one another or deleted, then a fresh DiskStore
// reconciles the directory, restores what it kept, sweeps orphans and deletes.
// Property: a restore that succeeds delivers exactly the bytes that were published (R4, R8).
// Input: up to 32 operations, each an opcode byte and its operands (see ApplyOp).

#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "services/cache/disk/catalog.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/file_system.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

constexpr int kMaxOps = 32;
constexpr uint64_t kMaxPieceBytes = 1 << 20;  // Restore destinations larger are refused.

DiskStoreOptions StoreOptions(const std::string& root) {
  DiskStoreOptions o;
  o.root = root;
  o.free_space_reserve_bytes = 0;
  o.incarnation = 7;
  return o;
}

// Turns fuzz bytes into a file name that stays inside its directory.
std::string SafeName(absl::string_view raw) {
  std::string name;
  // The prefix goes in first: GCC 12 at -O2 misreads an insert at 0 as an overlapping memcpy.
  if (raw.empty() || raw[0] == '.') name.push_back('f');
  for (char c : raw.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    name.push_back(ok ? c : 'x');
  }
  return name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, absl::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One damaging operation on the closed store's directory. `catalog` is opened on demand and
// must be closed before the store is opened again.
void ApplyOp(fuzz::FuzzInput& in, const std::string& root, std::unique_ptr<Catalog>* catalog) {
  const std::vector<std::string> files = testing::DataFiles(root);
  auto pick = [&](uint8_t b) { return root + "/" + files[b % files.size()]; };
  std::error_code ec;
  const uint8_t op = in.Byte() % 7;
  if (op <= 1 && *catalog == nullptr) {
    absl::StatusOr<std::unique_ptr<Catalog>> opened =
        Catalog::Open(root + "/catalog", nullptr, CatalogOptions{});
    if (!opened.ok()) return;
    *catalog = std::move(*opened);
  }
  switch (op) {
    case 0: {  // A catalog record with an arbitrary manifest copy.
      CatalogEntry e;
      const uint8_t b = in.Byte();
      e.checkpoint_id = b % 4;
      e.quarantined = (b & 0x80) != 0;
      e.manifest = std::string(in.Piece());
      (*catalog)->Put(e).IgnoreError();
      break;
    }
    case 1:
      (*catalog)->Remove(in.Byte() % 4).IgnoreError();
      break;
    case 2: {  // A new file in one of the tier's directories.
      static constexpr const char* kDirs[] = {"chunks", "states", "manifests", "quarantine"};
      const std::string dir = kDirs[in.Byte() % 4];
      const std::string name = SafeName(in.Piece());
      WriteAll(root + "/" + dir + "/" + name, in.Piece());
      break;
    }
    case 3:  // Truncate a file.
      if (!files.empty()) {
        const std::string path = pick(in.Byte());
        const uint64_t size = std::filesystem::file_size(path, ec);
        if (!ec) std::filesystem::resize_file(path, in.U16() % (size + 1), ec);
      }
      break;
    case 4:  // Overwrite one byte.
      if (!files.empty()) {
        const std::string path = pick(in.Byte());
        std::string bytes = ReadAll(path);
        const uint16_t at = in.U16();
        const uint8_t value = in.Byte();
        if (!bytes.empty()) bytes[at % bytes.size()] = static_cast<char>(value);
        WriteAll(path, bytes);
      }
      break;
    case 5:  // Delete a file.
      if (!files.empty()) std::filesystem::remove(pick(in.Byte()), ec);
      break;
    default:  // Copy one intact file over another (the right bytes in the wrong place).
      if (!files.empty()) {
        const std::string from = pick(in.Byte());
        WriteAll(pick(in.Byte()), ReadAll(from));
      }
      break;
  }
}

// Two published checkpoints sharing a chunk, made once per process; every input starts from a
// copy. Never destroyed (fuzz targets run until the process exits).
struct Published {
  testing::TempDir dir;
  testing::CheckpointFactory factory{/*chunk_rows=*/4, /*row_bytes=*/16};
};

Published* Publish() {
  auto* p = new Published();
  CAIRN_CHECK(!p->dir.path().empty());
  absl::StatusOr<std::unique_ptr<DiskStore>> store =
      DiskStore::Create(StoreOptions(p->dir.path()), PosixFileSystem());
  CAIRN_CHECK(store.ok());
  CAIRN_CHECK((*store)->Publish(p->factory.Build(1, {}, 2, 256, 3)).ok());
  CAIRN_CHECK((*store)->Publish(p->factory.Build(2, {p->factory.ChunksOf(1)[0]}, 1, 128, 1)).ok());
  return p;
}

void Run(fuzz::FuzzInput& in) {
  SetMinLogLevel(LogLevel::kError);  // Quarantines are routine here.
  static Published* const published = Publish();
  const testing::CheckpointFactory& factory = published->factory;
  testing::TempDir dir;
  CAIRN_CHECK(!dir.path().empty());
  std::error_code ec;
  std::filesystem::copy(published->dir.path(), dir.path(), std::filesystem::copy_options::recursive,
                        ec);
  CAIRN_CHECK(!ec);
  std::unique_ptr<Catalog> catalog;
  for (int i = 0; i < kMaxOps && !in.empty(); ++i) ApplyOp(in, dir.path(), &catalog);
  catalog.reset();

  absl::StatusOr<std::unique_ptr<DiskStore>> store =
      DiskStore::Create(StoreOptions(dir.path()), PosixFileSystem());
  if (!store.ok()) return;  // A clear error is fine.
  for (const DiskCheckpointInfo& info : (*store)->ListCheckpoints()) {
    std::deque<std::vector<uint8_t>> pieces;  // Stable addresses.
    absl::Status restored = (*store)->Restore(
        info.checkpoint_id, [&](const RestorePiece& piece) -> absl::StatusOr<absl::Span<uint8_t>> {
          if (piece.bytes > kMaxPieceBytes) return absl::ResourceExhaustedError("piece too big");
          pieces.emplace_back(piece.bytes);
          return absl::MakeSpan(pieces.back());
        });
    if (!restored.ok()) continue;
    std::vector<uint8_t> got;
    for (const std::vector<uint8_t>& p : pieces) got.insert(got.end(), p.begin(), p.end());
    // Only checkpoints 1 and 2 were ever published: anything else restored is made up.
    CAIRN_CHECK(info.checkpoint_id == 1 || info.checkpoint_id == 2);
    CAIRN_CHECK(got == factory.Expected(info.checkpoint_id));
  }
  (*store)->SweepOrphans().IgnoreError();
  for (const DiskCheckpointInfo& info : (*store)->ListCheckpoints()) {
    (*store)->Delete(info.checkpoint_id).IgnoreError();
  }
}

}  // namespace
}  // namespace cairn::cache

CAIRN_FUZZ_TARGET(DiskRecovery) {
  cairn::fuzz::FuzzInput in(data, size);
  cairn::cache::Run(in);
  return 0;
}
