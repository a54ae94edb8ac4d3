#ifndef CAIRN_TESTS_INTEGRATION_AUDIT_STRACE_AUDIT_H_
#define CAIRN_TESTS_INTEGRATION_AUDIT_STRACE_AUDIT_H_

// The syscall audit (reliability plan A5, F2): reads what `strace -ff -ttt -T -y` recorded of a
// cairn-cache run and checks the disk tier's publication and deletion order
// (docs/disk-format.md, docs/reliability.md P1-P9) and that nothing was opened outside the
// directories the daemon owns.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::audit {

// Returns the path of the strace binary on PATH, or "" when it is not installed.
std::string FindStrace();

// The strace command line (binary first) with the options the parser expects (one file per thread,
// absolute timestamps, durations, paths of descriptors, paths unabridged) and the calls it needs.
std::vector<std::string> StraceArgs(const std::string& output_prefix);

// One traced system call.
struct Syscall {
  double start = 0;     // Seconds since the epoch, at entry.
  double duration = 0;  // Seconds in the call.
  int tid = 0;
  std::string name;   // "openat", "fsync", ...
  std::string path;   // The file it names or the descriptor's path ("" if none).
  std::string path2;  // rename*: the new name.
  std::string flags;  // open*: the flags as strace prints them.
  bool failed = false;
  double end() const { return start + duration; }
};

// Parses one line of an strace -ff -ttt -T -y log. Returns false for lines that are not a
// completed system call (signals, exits).
bool ParseStraceLine(const std::string& line, int tid, Syscall* out);

// Reads every `prefix.<tid>` file and returns the calls of all threads by start time.
absl::StatusOr<std::vector<Syscall>> ReadStraceLogs(const std::string& prefix);

struct AuditOptions {
  std::string state_dir;    // The disk tier's root (--cache-disk).
  std::string runtime_dir;  // Where the daemon's sockets live.
  // Checkpoint id -> when the client first saw it acknowledged (on disk after a Flush),
  // seconds since the epoch. Every such publish must be durable (P6) before that time (P7).
  std::map<uint64_t, double> acknowledged;
  // Checkpoint id -> when the client's delete of it returned.
  std::map<uint64_t, double> deleted;
};

struct AuditReport {
  int publishes = 0;  // Manifests renamed into place.
  int deletes = 0;    // Manifests unlinked.
  int directory_syncs = 0;
  std::vector<std::string> violations;  // "P5: ...", one line each.
  std::vector<std::string> outside;     // F2: paths used outside the allowed directories.
};

// Checks `calls` (one daemon run, in start order) against P1-P9 and F2.
AuditReport Audit(const std::vector<Syscall>& calls, const AuditOptions& options);

}  // namespace cairn::audit

#endif  // CAIRN_TESTS_INTEGRATION_AUDIT_STRACE_AUDIT_H_
