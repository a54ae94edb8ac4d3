// The audit's checker on hand-written traces: a correct publish and delete pass, and each
// step of the publication order left out or moved is reported under its rule.

#include "tests/integration/audit/strace_audit.h"

#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace cairn::audit {
namespace {

constexpr char kRoot[] = "/s";

// A correct publish of checkpoint 0x1a, then its deletion, as strace prints them.
std::vector<std::string> GoodTrace() {
  return {
      R"(10.000000 openat(AT_FDCWD</w>, "/s/chunks/c-1-7-1.chunk", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 5</s/chunks/c-1-7-1.chunk> <0.000010>)",
      R"(10.000100 pwrite64(5</s/chunks/c-1-7-1.chunk>, "\0\1"..., 4096, 0) = 4096 <0.000010>)",
      R"(10.000200 fdatasync(5</s/chunks/c-1-7-1.chunk>) = 0 <0.000100>)",
      R"(10.000400 openat(AT_FDCWD</w>, "/s/states/s-1a-7-1.state", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 6</s/states/s-1a-7-1.state> <0.000010>)",
      R"(10.000500 write(6</s/states/s-1a-7-1.state>, "abc", 3) = 3 <0.000010>)",
      R"(10.000600 fsync(6</s/states/s-1a-7-1.state>) = 0 <0.000100>)",
      R"(10.000800 fsync(7</s/chunks>) = 0 <0.000100>)",
      R"(10.001000 fsync(7</s/states>) = 0 <0.000100>)",
      R"(10.001200 openat(AT_FDCWD</w>, "/s/manifests/m-1a.manifest.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0600) = 8</s/manifests/m-1a.manifest.tmp> <0.000010>)",
      R"(10.001300 write(8</s/manifests/m-1a.manifest.tmp>, "m", 1) = 1 <0.000010>)",
      R"(10.001400 fsync(8</s/manifests/m-1a.manifest.tmp>) = 0 <0.000100>)",
      R"(10.001600 rename("/s/manifests/m-1a.manifest.tmp", "/s/manifests/m-1a.manifest") = 0 <0.000010>)",
      R"(10.001700 fsync(9</s/manifests>) = 0 <0.000100>)",
      R"(10.001900 write(10</s/catalog/000004.log>, "put", 3) = 3 <0.000010>)",
      R"(10.002000 fdatasync(10</s/catalog/000004.log>) = 0 <0.000100>)",
      R"(11.000000 write(10</s/catalog/000004.log>, "del", 3) = 3 <0.000010>)",
      R"(11.000100 fdatasync(10</s/catalog/000004.log>) = 0 <0.000100>)",
      R"(11.000300 unlink("/s/manifests/m-1a.manifest") = 0 <0.000010>)",
      R"(11.000400 fsync(9</s/manifests>) = 0 <0.000100>)",
      R"(11.000600 unlink("/s/chunks/c-1-7-1.chunk") = 0 <0.000010>)",
      R"(11.000700 unlink("/s/states/s-1a-7-1.state") = 0 <0.000010>)",
      R"(11.000800 openat(AT_FDCWD</w>, "/lib/x86_64-linux-gnu/libc.so.6", O_RDONLY|O_CLOEXEC) = 3</lib/x86_64-linux-gnu/libc.so.6> <0.000010>)",
  };
}

// `tids[i]` is the thread of `lines[i]` (thread 1 where not given).
AuditReport AuditLines(const std::vector<std::string>& lines, double acknowledged_at = 10.5,
                       const std::vector<int>& tids = {}) {
  std::vector<Syscall> calls;
  for (size_t i = 0; i < lines.size(); ++i) {
    Syscall c;
    EXPECT_TRUE(ParseStraceLine(lines[i], i < tids.size() ? tids[i] : 1, &c)) << lines[i];
    calls.push_back(c);
  }
  AuditOptions options;
  options.state_dir = kRoot;
  options.runtime_dir = "/run/cairn";
  options.acknowledged[0x1a] = acknowledged_at;
  return Audit(calls, options);
}

// Returns `lines` without the line containing `needle`.
std::vector<std::string> Without(std::vector<std::string> lines, const std::string& needle) {
  std::erase_if(lines, [&](const std::string& l) { return absl::StrContains(l, needle); });
  return lines;
}

bool Reports(const AuditReport& r, const std::string& rule) {
  for (const std::string& v : r.violations) {
    if (absl::StartsWith(v, rule)) return true;
  }
  ADD_FAILURE() << "no " << rule << " among:\n" << absl::StrJoin(r.violations, "\n");
  return false;
}

TEST(StraceAuditTest, ParsesPathsFlagsAndTimes) {
  Syscall c;

  ASSERT_TRUE(ParseStraceLine(GoodTrace()[0], 42, &c));

  EXPECT_EQ(c.name, "openat");
  EXPECT_EQ(c.path, "/s/chunks/c-1-7-1.chunk");
  EXPECT_EQ(c.flags, "O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC");
  EXPECT_DOUBLE_EQ(c.start, 10.0);
  EXPECT_DOUBLE_EQ(c.duration, 0.00001);
  EXPECT_EQ(c.tid, 42);
  EXPECT_FALSE(c.failed);
  ASSERT_TRUE(ParseStraceLine(
      R"(1.5 renameat2(AT_FDCWD</w>, "a.tmp", AT_FDCWD</w>, "a", 0) = 0 <0.1>)", 1, &c));
  EXPECT_EQ(c.path, "/w/a.tmp");
  EXPECT_EQ(c.path2, "/w/a");
  ASSERT_TRUE(ParseStraceLine(
      R"(1.5 openat(AT_FDCWD</w>, "/x", O_RDONLY) = -1 ENOENT (No such file or directory) <0.1>)",
      1, &c));
  EXPECT_TRUE(c.failed);
  EXPECT_FALSE(ParseStraceLine("+++ exited with 0 +++", 1, &c));
}

TEST(StraceAuditTest, ACorrectPublishAndDeletePass) {
  const AuditReport r = AuditLines(GoodTrace());

  EXPECT_EQ(r.publishes, 1);
  EXPECT_EQ(r.deletes, 1);
  EXPECT_TRUE(r.violations.empty()) << absl::StrJoin(r.violations, "\n");
  EXPECT_TRUE(r.outside.empty()) << absl::StrJoin(r.outside, "\n");
}

TEST(StraceAuditTest, EveryMissingStepIsReportedUnderItsRule) {
  EXPECT_TRUE(Reports(AuditLines(Without(GoodTrace(), "fdatasync(5")), "P2"));
  EXPECT_TRUE(Reports(AuditLines(Without(GoodTrace(), "fsync(7</s/chunks>")), "P3"));
  EXPECT_TRUE(Reports(AuditLines(Without(GoodTrace(), "fsync(8")), "P4"));
  std::vector<std::string> no_dir_sync = Without(GoodTrace(), "fsync(9</s/manifests>)");
  EXPECT_TRUE(Reports(AuditLines(no_dir_sync), "P5"));
  std::vector<std::string> publish_only = GoodTrace();
  publish_only.resize(15);  // Up to the publish's catalog sync.
  EXPECT_TRUE(Reports(AuditLines(Without(publish_only, "\"put\"")), "P6"));
  // With a delete after it, the delete's catalog write comes too late for the acknowledgement.
  EXPECT_TRUE(Reports(AuditLines(Without(GoodTrace(), "\"put\"")), "P7"));
  EXPECT_TRUE(Reports(AuditLines(Without(GoodTrace(), "\"del\"")), "P9"));
}

TEST(StraceAuditTest, AnAcknowledgementBeforeTheSyncedCatalogWriteIsReported) {
  EXPECT_TRUE(Reports(AuditLines(GoodTrace(), /*acknowledged_at=*/10.0019), "P7"));
}

TEST(StraceAuditTest, AChunkUnlinkedBeforeItsManifestIsReported) {
  std::vector<std::string> lines = GoodTrace();
  std::swap(lines[17], lines[19]);  // The chunk goes before the manifest.

  EXPECT_TRUE(Reports(AuditLines(lines), "P9"));
}

TEST(StraceAuditTest, AChunkUnlinkedBeforeManifestsIsFsyncedIsReported) {
  std::vector<std::string> lines = GoodTrace();
  std::swap(lines[18], lines[19]);  // The chunk goes before the manifests/ fsync.

  EXPECT_TRUE(Reports(AuditLines(lines), "P9"));
}

// Whether a violation's text contains `what`.
bool ReportsText(const AuditReport& r, const std::string& what) {
  return absl::c_any_of(r.violations,
                        [&](const std::string& v) { return absl::StrContains(v, what); });
}
bool ReportsChunkUnlink(const AuditReport& r) {
  return ReportsText(r, "a chunk file was unlinked");
}

// A delete runs on one thread while the background writer publishes on another: a publish's
// rename between the delete's manifest unlink and its chunk unlinks does not make them early.
TEST(StraceAuditTest, APublishOnAnotherThreadDuringADeleteIsNotAChunkViolation) {
  std::vector<std::string> lines = GoodTrace();
  lines.insert(
      lines.begin() + 19,
      R"(11.000500 rename("/s/manifests/m-1b.manifest.tmp", "/s/manifests/m-1b.manifest") = 0 <0.000010>)");
  std::vector<int> tids(lines.size(), 1);

  tids[19] = 2;  // The publish is another thread's.
  EXPECT_FALSE(ReportsChunkUnlink(AuditLines(lines, 10.5, tids)));

  tids[19] = 1;  // The deleting thread itself published: its later chunk unlinks are suspect.
  EXPECT_TRUE(ReportsChunkUnlink(AuditLines(lines, 10.5, tids)));
}

bool ReportsManifestUnlink(const AuditReport& r) {
  return ReportsText(r, "the manifest was unlinked before its catalog entry");
}

// Another thread's publish renamed between a delete's synced catalog write and its manifest
// unlink leaves the delete's order intact; the deleting thread's own rename there does not.
TEST(StraceAuditTest, ARenameOnAnotherThreadBeforeADeletesUnlinkIsNotAnOrderViolation) {
  std::vector<std::string> lines = GoodTrace();
  lines.insert(
      lines.begin() + 17,
      R"(11.000200 rename("/s/manifests/m-1b.manifest.tmp", "/s/manifests/m-1b.manifest") = 0 <0.000010>)");
  std::vector<int> tids(lines.size(), 1);
  for (size_t i = 15; i < lines.size(); ++i) tids[i] = 2;  // The delete is thread 2's.

  tids[17] = 1;  // The publish is another thread's.
  EXPECT_FALSE(ReportsManifestUnlink(AuditLines(lines, 10.5, tids)));

  tids[17] = 2;  // The deleting thread renamed after its catalog write: the write is stale.
  EXPECT_TRUE(ReportsManifestUnlink(AuditLines(lines, 10.5, tids)));
}

// The catalog's group commit: one WAL sync makes a publish's write (thread 1) and a delete's
// (thread 2) durable. It counts for both threads, but not twice for one.
TEST(StraceAuditTest, OneWalSyncForAPublishAndAnotherThreadsDeleteIsNotAnOrderViolation) {
  std::vector<std::string> lines = Without(Without(GoodTrace(), "\"del\""), "11.000100");
  lines.insert(lines.begin() + 14,
               R"(10.001950 write(10</s/catalog/000004.log>, "del", 3) = 3 <0.000010>)");
  std::vector<int> tids(lines.size(), 1);
  tids[14] = 2;
  for (size_t i = 16; i < lines.size(); ++i) tids[i] = 2;  // The delete's unlinks.
  EXPECT_FALSE(ReportsManifestUnlink(AuditLines(lines, 10.5, tids)));

  std::fill(tids.begin(), tids.end(), 1);  // One thread: the publish already used that sync.
  EXPECT_TRUE(ReportsManifestUnlink(AuditLines(lines, 10.5, tids)));
}

// A delete on another thread unlinking a manifest between a publish's manifests/ fsync and its
// synced catalog write is not the publish's next manifest operation; the publishing thread's
// own unlink there is.
TEST(StraceAuditTest, AnUnlinkOnAnotherThreadBeforeAPublishsCatalogWriteIsNotLate) {
  std::vector<std::string> lines = GoodTrace();
  lines.insert(lines.begin() + 13,
               R"(10.001800 unlink("/s/manifests/m-1b.manifest") = 0 <0.000010>)");
  std::vector<int> tids(lines.size(), 1);
  const std::string late = "has no synced catalog write before the next manifest operation";

  tids[13] = 2;
  EXPECT_FALSE(ReportsText(AuditLines(lines, 10.5, tids), late));

  tids[13] = 1;
  EXPECT_TRUE(ReportsText(AuditLines(lines, 10.5, tids), late));
}

TEST(StraceAuditTest, FilesOutsideTheOwnedDirectoriesAreReported) {
  std::vector<std::string> lines = GoodTrace();
  lines.push_back(
      R"(12.0 openat(AT_FDCWD</w>, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 3</etc/passwd> <0.1>)");
  lines.push_back(
      R"(12.1 openat(AT_FDCWD</w>, "/lib/x", O_WRONLY|O_CREAT, 0600) = 3</lib/x> <0.1>)");
  lines.push_back(R"(12.2 openat(AT_FDCWD</w>, "../escape", O_RDONLY) = 3</escape> <0.1>)");

  const AuditReport r = AuditLines(lines);

  EXPECT_EQ(r.outside.size(), 3u) << absl::StrJoin(r.outside, "\n");
}

}  // namespace
}  // namespace cairn::audit
