#ifndef CAIRN_TESTS_UNIT_SERVICES_CACHE_DISK_DISK_STORE_FIXTURE_H_
#define CAIRN_TESTS_UNIT_SERVICES_CACHE_DISK_DISK_STORE_FIXTURE_H_

// The disk store tests' fixture: a store over a temporary directory and the helpers that damage
// and inspect its files (disk_store_test.cc, disk_store_quarantine_test.cc).

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "services/cache/disk/disk_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache::testing {

constexpr uint32_t kRows = 16;
constexpr uint64_t kRowBytes = 256;

class DiskStoreTest : public ::testing::Test {
 protected:
  DiskStoreOptions Options() {
    DiskStoreOptions o;
    o.root = dir_.path();
    o.free_space_reserve_bytes = 0;
    return o;
  }
  std::unique_ptr<DiskStore> Open(DiskStoreOptions o) {
    auto store = DiskStore::Create(o, PosixFileSystem());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::unique_ptr<DiskStore> Open() { return Open(Options()); }
  // Opens the store, runs `write` on it and opens it again, as after a restart.
  std::unique_ptr<DiskStore> WriteAndReopen(const std::function<void(DiskStore&)>& write) {
    {
      auto store = Open();
      if (store == nullptr) return nullptr;
      write(*store);
    }
    return Open();
  }
  std::string Path(const std::string& rel) { return dir_.path() + "/" + rel; }
  // Flips one byte in the payload of the file at `rel`.
  void FlipByte(const std::string& rel) {
    std::fstream f(Path(rel), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    const char byte = static_cast<char>(f.get());
    f.seekp(200);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  // Damages checkpoint `id`'s state file; verifying it quarantines it.
  void QuarantineByVerify(DiskStore* store, uint64_t id) {
    auto m = store->GetManifest(id);
    ASSERT_TRUE(m.ok()) << m.status();
    FlipByte("states/" + m->state_file.name);
    ASSERT_THAT(store->Verify(id), ::cairn::testing::StatusIs(absl::StatusCode::kDataLoss));
  }
  // The names of the manifests kept in quarantine/, sorted.
  std::vector<std::string> QuarantinedManifests() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(Path("quarantine"))) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  TempDir dir_;
  CheckpointFactory factory_{kRows, kRowBytes};
};

}  // namespace cairn::cache::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_CACHE_DISK_DISK_STORE_FIXTURE_H_
