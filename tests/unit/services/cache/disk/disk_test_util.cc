#include "tests/unit/services/cache/disk/disk_test_util.h"

#include <stdlib.h>

#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

namespace cairn::cache::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "cairn-disk-XXXXXX").string();
  char* made = ::mkdtemp(tmpl.data());
  path_ = made != nullptr ? std::string(made) : std::string();
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

std::vector<uint8_t> Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 1);
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<uint8_t>(v >> (8 * j));
  }
  return out;
}

PublishRequest CheckpointFactory::Build(uint64_t id, const std::vector<uint64_t>& shared,
                                        int n_new, uint64_t state_bytes, uint32_t tail_rows) {
  PublishRequest r;
  r.checkpoint_id = id;
  r.compat_digest = "compat-test-v1";
  r.input_digest = "";
  std::vector<uint64_t>& order = chunks_of_[id];
  order = shared;
  r.shared_chunk_ids = shared;
  const uint64_t first_new_row = shared.size() * rows_;
  for (int i = 0; i < n_new; ++i) {
    const uint64_t chunk_id = next_chunk_++;
    chunk_bytes_[chunk_id] = Pattern(chunk_id * 7919 + 11, rows_ * row_bytes_);
    ChunkWrite w;
    w.id = ChunkIdentity{chunk_id, 0, first_new_row + i * rows_, rows_, row_bytes_};
    w.bytes = chunk_bytes_[chunk_id];
    r.new_chunks.push_back(w);
    order.push_back(chunk_id);
  }
  const uint64_t depth = order.size() * rows_ + tail_rows;
  for (uint64_t t = 0; t < depth; ++t) r.tokens.push_back(static_cast<uint32_t>(t * 31 + id));
  r.sections = {StateSection{0, SectionKind::kTail, order.size() * rows_, tail_rows,
                             tail_rows * row_bytes_},
                StateSection{1, SectionKind::kPrivate, 0, 0, state_bytes}};
  state_bytes_[id] = Pattern(id * 104729 + 3, tail_rows * row_bytes_ + state_bytes);
  r.state = state_bytes_[id];
  return r;
}

std::vector<uint8_t> CheckpointFactory::Expected(uint64_t id) const {
  std::vector<uint8_t> out = state_bytes_.at(id);
  for (uint64_t c : chunks_of_.at(id)) {
    const std::vector<uint8_t>& b = chunk_bytes_.at(c);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

absl::StatusOr<std::vector<uint8_t>> RestoreAll(DiskStore* store, uint64_t id) {
  std::vector<std::vector<uint8_t>> pieces;
  absl::Status s = store->Restore(id, [&](const RestorePiece& piece) {
    pieces.emplace_back(piece.bytes);
    return absl::Span<uint8_t>(pieces.back());
  });
  if (!s.ok()) return s;
  std::vector<uint8_t> out;
  for (const auto& p : pieces) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<std::string> DataFiles(const std::string& root) {
  std::vector<std::string> names;
  for (const char* dir : {"chunks", "states", "manifests"}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(root + "/" + dir, ec)) {
      names.push_back(std::string(dir) + "/" + entry.path().filename().string());
    }
  }
  return names;
}

absl::StatusOr<std::unique_ptr<DiskStore>> OpenTestStore(const std::string& root) {
  DiskStoreOptions o;
  o.root = root;
  o.free_space_reserve_bytes = 0;
  return DiskStore::Create(o, PosixFileSystem());
}

absl::StatusOr<std::unique_ptr<WritableFile>> HookFileSystem::NewWritableFile(
    const std::string& p) {
  if (before_create_) before_create_(p);
  return base_->NewWritableFile(p);
}

absl::Status HookFileSystem::Rename(const std::string& from, const std::string& to) {
  absl::Status s = base_->Rename(from, to);
  if (s.ok() && after_rename_) after_rename_(to);
  return s;
}

absl::Status HookFileSystem::Delete(const std::string& p) {
  absl::Status s = base_->Delete(p);
  if (s.ok() && after_delete_) after_delete_(p);
  return s;
}

absl::StatusOr<uint64_t> HookFileSystem::FileSize(const std::string& p) {
  if (before_file_size_) before_file_size_(p);
  return base_->FileSize(p);
}

bool FakeModelActivity::WaitUntilIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  ++waits_;
  cv_.SignalAll();
  while (busy_) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    cv_.WaitWithTimeout(&mu_, left);
  }
  return true;
}

void FakeModelActivity::SetBusy(bool busy) {
  MutexLock lock(&mu_);
  busy_ = busy;
  cv_.SignalAll();
}

bool FakeModelActivity::WaitForWaits(int n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (waits_ < n) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    cv_.WaitWithTimeout(&mu_, left);
  }
  return true;
}

}  // namespace cairn::cache::testing
