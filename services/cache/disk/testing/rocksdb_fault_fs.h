#ifndef CAIRN_SERVICES_CACHE_DISK_TESTING_ROCKSDB_FAULT_FS_H_
#define CAIRN_SERVICES_CACHE_DISK_TESTING_ROCKSDB_FAULT_FS_H_

// Lets RocksDB's own file operations reach a FaultFileSystem (docs/reliability.md §5.1, A6):
// creates, appends, syncs, renames, deletes and directory fsyncs of the catalog are counted,
// crashed and rolled back by the same tracker as the disk tier's files. Debian's RocksDB 7.8
// ships no fault_injection_fs.h, hence this wrapper.

#include <memory>

#include "rocksdb/file_system.h"
#include "services/cache/disk/testing/fault_file_system.h"

namespace cairn::cache {

// Returns a rocksdb::FileSystem over RocksDB's default one that reports to `fault` (which must
// outlive the returned object and every DB opened on it). Thread-safe.
std::shared_ptr<rocksdb::FileSystem> NewRocksDbFaultFs(FaultFileSystem* fault);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_TESTING_ROCKSDB_FAULT_FS_H_
