#ifndef CAIRN_SERVICES_CACHE_DISK_CATALOG_H_
#define CAIRN_SERVICES_CACHE_DISK_CATALOG_H_

// The RocksDB catalog of the disk tier: one entry per checkpoint holding a copy of its manifest
// and its quarantine flag, so that start-up reads the catalog and file sizes only (R1). The
// manifests stay the source of truth; the catalog can always be rebuilt from them (R2). Besides
// the entries it holds two records that no manifest has: the checkpoint ids and the chunk ids
// reserved so far (docs/disk-format.md, "The catalog").

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/options.h"

namespace cairn::cache {

struct CatalogOptions {
  bool paranoid_checks = true;  // A6: asserted by the tests.
  // Set explicitly (A6): after a power loss, recover the longest consistent WAL prefix.
  rocksdb::WALRecoveryMode wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  int max_background_jobs = 1;  // The catalog is small; leave the cores to the model.
  // Entries hold whole manifests, and neighbours repeat the chunk entries they share: larger
  // blocks compress them several times better, and LZ4 decompresses them several times
  // faster than RocksDB's default Snappy (docs/benchmarks.md, "Disk tier").
  rocksdb::CompressionType compression = rocksdb::kLZ4Compression;
  size_t block_bytes = 32 << 10;
  // Each start-up flushes the previous run's log into a small table file, and their key
  // ranges (one id range per incarnation) rarely overlap, so RocksDB moves them down the
  // levels without merging them: a daemon restarted many times would read ever more files at
  // start-up. Open merges them into one when there are more than this.
  size_t max_table_files = 8;
  // RocksDB's automatic compactions, which run on its background thread. Off only in tests that
  // count a foreground call's file-system operations (FaultFileSystem): a compaction that starts
  // after a reopen would put its own operations among them, at places that vary from run to run.
  bool auto_compactions = true;
};

// The largest id a reserved-ids record may name. Daemons reserve ids in blocks of at most 2^40
// above ids they found; a record above this is damage (an id after it could wrap past 2^64).
inline constexpr uint64_t kMaxReservedId = uint64_t{1} << 62;

struct CatalogEntry {
  uint64_t checkpoint_id = 0;
  bool quarantined = false;
  std::string manifest;  // The encoded manifest, as in the manifest file.
};

// Thread-safe (RocksDB is). Every write uses WriteOptions::sync = true (P6, P9).
class Catalog {
 public:
  // Opens (creating if needed) the catalog at directory `path`. `fs` is the file system
  // RocksDB uses (nullptr = RocksDB's default). Errors: DataLoss for a corrupt catalog,
  // Unavailable for I/O errors.
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(const std::string& path,
                                                       std::shared_ptr<rocksdb::FileSystem> fs,
                                                       const CatalogOptions& options);
  ~Catalog();

  // Writes the entry for `entry.checkpoint_id` durably.
  absl::Status Put(const CatalogEntry& entry);
  // Removes the entry for `checkpoint_id` durably (absent is not an error).
  absl::Status Remove(uint64_t checkpoint_id);
  // Records durably that every checkpoint id up to `up_to` may have been handed out,
  // replacing the previous record (callers only raise it).
  absl::Status PutReservedCheckpointIds(uint64_t up_to);
  // Returns the recorded id (PutReservedCheckpointIds), or 0 when the catalog holds no record
  // (one written before the record existed). DataLoss for a malformed record, or one above
  // kMaxReservedId.
  absl::StatusOr<uint64_t> ReservedCheckpointIds() const;
  // The same two for chunk ids, in a record of their own.
  absl::Status PutReservedChunkIds(uint64_t up_to);
  absl::StatusOr<uint64_t> ReservedChunkIds() const;
  // Returns every checkpoint entry, in checkpoint-id order (not the reserved-ids records).
  // DataLoss for a malformed entry key or value.
  absl::StatusOr<std::vector<CatalogEntry>> LoadAll() const;
  // Calls `visit(checkpoint_id, quarantined, manifest)` for every entry in checkpoint-id order,
  // without copying the values: `manifest` is valid only during the call, and `visit` must not
  // write to the catalog. Stops at the first error `visit` returns and returns it; DataLoss for
  // a malformed entry. Start-up's scan: the blocks it reads are not kept in RocksDB's cache.
  absl::Status ForEach(const std::function<absl::Status(uint64_t checkpoint_id, bool quarantined,
                                                        absl::string_view manifest)>& visit) const;
  // Runs RocksDB's VerifyChecksum over the catalog's files (B1, R7).
  absl::Status VerifyChecksums() const;

  const rocksdb::Options& options() const { return options_; }

 private:
  Catalog(std::unique_ptr<rocksdb::Env> env, rocksdb::Options options,
          std::unique_ptr<rocksdb::DB> db);

  std::unique_ptr<rocksdb::Env> env_;  // Outlives db_.
  rocksdb::Options options_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_CATALOG_H_
