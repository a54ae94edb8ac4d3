#include "services/cache/disk/catalog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "rocksdb/convenience.h"
#include "rocksdb/iterator.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace cairn::cache {
namespace {

constexpr char kEntryPrefix = 'c';
// Outside the entries' key space (another prefix and length): deleted at every close so that
// the close's flush has something to write (see ~Catalog). Never present, so never read.
constexpr char kCloseMarkerKey[] = "close";
constexpr uint8_t kFlagQuarantined = 1;
// Outside the entries' key space too, and after it: the largest checkpoint id and the largest
// chunk id reserved so far, 8 bytes little-endian each. Written by daemons that reserve ids;
// catalogs from before have none (or only the first).
constexpr char kReservedIdsKey[] = "reserved-checkpoint-ids";
constexpr char kReservedChunkIdsKey[] = "reserved-chunk-ids";

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat("catalog ", what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(message);
  return absl::UnavailableError(message);
}

std::string Key(uint64_t checkpoint_id) {
  std::string key(9, '\0');
  key[0] = kEntryPrefix;
  for (int i = 0; i < 8; ++i) key[1 + i] = static_cast<char>(checkpoint_id >> (56 - 8 * i));
  return key;
}

rocksdb::WriteOptions SyncWrite() {
  rocksdb::WriteOptions w;
  w.sync = true;  // P6: the default (false) has the crash semantics of a bare write().
  return w;
}

// Writes the reserved-ids record `key` (`what`: "checkpoint" or "chunk").
absl::Status PutReserved(rocksdb::DB* db, const char* key, absl::string_view what, uint64_t up_to) {
  std::string value(8, '\0');
  for (int i = 0; i < 8; ++i) value[i] = static_cast<char>(up_to >> (8 * i));
  return FromRocks(db->Put(SyncWrite(), key, value),
                   absl::StrCat("reserve ", what, " ids up to ", up_to));
}

// Reads the reserved-ids record `key`: 0 when absent, DataLoss when malformed or above
// kMaxReservedId.
absl::StatusOr<uint64_t> GetReserved(rocksdb::DB* db, const char* key, absl::string_view what) {
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  std::string value;
  const rocksdb::Status s = db->Get(read, key, &value);
  if (s.IsNotFound()) return 0;
  RETURN_IF_ERROR(FromRocks(s, absl::StrCat("read reserved ", what, " ids")));
  if (value.size() != 8) {
    return absl::DataLossError(absl::StrCat("malformed reserved ", what, " ids record"));
  }
  uint64_t up_to = 0;
  for (int i = 7; i >= 0; --i) up_to = (up_to << 8) | static_cast<uint8_t>(value[i]);
  if (up_to > kMaxReservedId) {
    return absl::DataLossError(
        absl::StrCat("reserved ", what, " ids record names ", up_to, ", above 2^62"));
  }
  return up_to;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Catalog>> Catalog::Open(const std::string& path,
                                                       std::shared_ptr<rocksdb::FileSystem> fs,
                                                       const CatalogOptions& catalog_options) {
  std::unique_ptr<rocksdb::Env> env;
  rocksdb::Options options;
  if (fs != nullptr) {
    env = rocksdb::NewCompositeEnv(fs);
    options.env = env.get();
  }
  options.create_if_missing = true;
  options.paranoid_checks = catalog_options.paranoid_checks;
  options.wal_recovery_mode = catalog_options.wal_recovery_mode;
  options.max_background_jobs = catalog_options.max_background_jobs;
  options.disable_auto_compactions = !catalog_options.auto_compactions;
  options.recycle_log_file_num = 0;
  options.keep_log_file_num = 2;
  options.stats_dump_period_sec = 0;
  options.stats_persist_period_sec = 0;
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  // Start-up reads every entry once (R1), so how fast blocks decompress is what matters; a
  // build of RocksDB without the codec keeps its default. Files written with another codec
  // stay readable: the codec is recorded per block.
  const std::vector<rocksdb::CompressionType> supported = rocksdb::GetSupportedCompressions();
  if (std::find(supported.begin(), supported.end(), catalog_options.compression) !=
      supported.end()) {
    options.compression = catalog_options.compression;
  }
  rocksdb::BlockBasedTableOptions table;
  table.block_size = catalog_options.block_bytes;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  absl::Status s = FromRocks(rocksdb::DB::Open(options, path, &raw), absl::StrCat("open ", path));
  if (!s.ok()) return s;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  if (files.size() > catalog_options.max_table_files) {
    rocksdb::CompactRangeOptions compact;
    compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    // Not merging only costs start-up time later: a failure is logged, never fatal.
    if (rocksdb::Status c = db->CompactRange(compact, nullptr, nullptr); !c.ok()) {
      CAIRN_LOG(WARNING) << "catalog " << path << ": merging " << files.size()
                         << " table files failed: " << c.ToString();
    }
    // The merged files are deleted by RocksDB's background call, which may outlast
    // CompactRange: pausing waits for it, so that Open's file operations end with Open.
    if (db->PauseBackgroundWork().ok()) db->ContinueBackgroundWork().PermitUncheckedError();
  }
  return std::unique_ptr<Catalog>(new Catalog(std::move(env), std::move(options), std::move(db)));
}

Catalog::Catalog(std::unique_ptr<rocksdb::Env> env, rocksdb::Options options,
                 std::unique_ptr<rocksdb::DB> db)
    : env_(std::move(env)), options_(std::move(options)), db_(std::move(db)) {}

Catalog::~Catalog() {
  // Every write is already durable in the log (P6, P9). Turning the log into a table now means
  // the next start-up reads a table instead of replaying this run's log into one (10,000
  // publishes: some 100 MB of manifests to parse, compress and sync before the scan). A
  // failure only leaves that work to the next start-up.
  // RocksDB skips the flush of an empty memtable, and then keeps this run's log (and every
  // earlier empty one) as still needed: each restart without a write would leave one more log
  // file behind. A tombstone for a key that never exists makes the memtable non-empty, so the
  // flush runs and moves the catalog past this run's log, which RocksDB then deletes. One batch,
  // not synced: if the process dies before the flush, recovery replays a delete of nothing.
  rocksdb::WriteBatch marker;
  marker.Delete(kCloseMarkerKey).PermitUncheckedError();
  db_->Write(rocksdb::WriteOptions(), &marker).PermitUncheckedError();
  rocksdb::FlushOptions flush;
  flush.wait = true;
  db_->Flush(flush).PermitUncheckedError();
  // Close errors after a simulated crash are expected; the catalog is rebuilt if needed.
  db_->Close().PermitUncheckedError();
  db_.reset();
}

absl::Status Catalog::Put(const CatalogEntry& entry) {
  std::string value;
  value.push_back(static_cast<char>(entry.quarantined ? kFlagQuarantined : 0));
  value.append(entry.manifest);
  return FromRocks(db_->Put(SyncWrite(), Key(entry.checkpoint_id), value),
                   absl::StrCat("put checkpoint ", entry.checkpoint_id));
}

absl::Status Catalog::Remove(uint64_t checkpoint_id) {
  return FromRocks(db_->Delete(SyncWrite(), Key(checkpoint_id)),
                   absl::StrCat("remove checkpoint ", checkpoint_id));
}

absl::Status Catalog::PutReservedCheckpointIds(uint64_t up_to) {
  return PutReserved(db_.get(), kReservedIdsKey, "checkpoint", up_to);
}

absl::StatusOr<uint64_t> Catalog::ReservedCheckpointIds() const {
  return GetReserved(db_.get(), kReservedIdsKey, "checkpoint");
}

absl::Status Catalog::PutReservedChunkIds(uint64_t up_to) {
  return PutReserved(db_.get(), kReservedChunkIdsKey, "chunk", up_to);
}

absl::StatusOr<uint64_t> Catalog::ReservedChunkIds() const {
  return GetReserved(db_.get(), kReservedChunkIdsKey, "chunk");
}

absl::StatusOr<std::vector<CatalogEntry>> Catalog::LoadAll() const {
  std::vector<CatalogEntry> entries;
  absl::Status s = ForEach([&](uint64_t id, bool quarantined, absl::string_view manifest) {
    entries.push_back(CatalogEntry{id, quarantined, std::string(manifest)});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return entries;
}

absl::Status Catalog::ForEach(
    const std::function<absl::Status(uint64_t, bool, absl::string_view)>& visit) const {
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  // One pass over every entry: caching its blocks would only evict each other.
  read.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key == rocksdb::Slice(kReservedIdsKey) || key == rocksdb::Slice(kReservedChunkIdsKey)) {
      continue;
    }
    const rocksdb::Slice value = it->value();
    if (key.size() != 9 || key[0] != kEntryPrefix || value.size() < 1) {
      return absl::DataLossError("malformed catalog entry");
    }
    uint64_t id = 0;
    for (int i = 0; i < 8; ++i) id = (id << 8) | static_cast<uint8_t>(key[1 + i]);
    const bool quarantined = (static_cast<uint8_t>(value[0]) & kFlagQuarantined) != 0;
    absl::Status s = visit(id, quarantined, absl::string_view(value.data() + 1, value.size() - 1));
    if (!s.ok()) return s;
  }
  return FromRocks(it->status(), "scan");
}

absl::Status Catalog::VerifyChecksums() const {
  return FromRocks(db_->VerifyChecksum(), "verify checksums");
}

}  // namespace cairn::cache
