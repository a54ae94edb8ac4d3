#include "tests/integration/audit/strace_audit.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace cairn::audit {
namespace {

// Reads a quoted strace string at `s[*pos]` (which must be '"'); leaves `*pos` after it.
// Only the escapes paths can contain are decoded.
std::string ReadQuoted(absl::string_view s, size_t* pos) {
  std::string out;
  size_t i = *pos + 1;
  while (i < s.size() && s[i] != '"') {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out.push_back(s[i + 1]);
      i += 2;
      continue;
    }
    out.push_back(s[i++]);
  }
  *pos = i + 1;
  return out;
}

// Reads a descriptor argument at `s[*pos]` ("12</path>", "AT_FDCWD</path>" or without the
// decoration); returns its path ("" if undecorated) and leaves `*pos` after it.
std::string ReadFd(absl::string_view s, size_t* pos) {
  size_t i = *pos;
  while (i < s.size() && s[i] != '<' && s[i] != ',' && s[i] != ')') ++i;
  std::string path;
  if (i < s.size() && s[i] == '<') {
    const size_t close = s.find('>', i);
    path = std::string(s.substr(i + 1, close - i - 1));
    i = close + 1;
  }
  *pos = i;
  return path;
}

void SkipSeparator(absl::string_view s, size_t* pos) {
  while (*pos < s.size() && (s[*pos] == ',' || s[*pos] == ' ')) ++*pos;
}

std::string Resolve(const std::string& dir, const std::string& name) {
  if (name.empty() || name[0] == '/' || dir.empty()) return name;
  return dir + "/" + name;
}

// The token after the path of an open call: its flags.
std::string ReadToken(absl::string_view s, size_t* pos) {
  SkipSeparator(s, pos);
  const size_t start = *pos;
  while (*pos < s.size() && s[*pos] != ',' && s[*pos] != ')') ++*pos;
  return std::string(s.substr(start, *pos - start));
}

bool Under(const std::string& path, const std::string& dir) {
  if (dir.empty()) return false;
  return path == dir || absl::StartsWith(path, dir + "/");
}

std::string Parent(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

bool Writes(const Syscall& c) {
  if (c.name == "open" || c.name == "openat") {
    return absl::StrContains(c.flags, "O_WRONLY") || absl::StrContains(c.flags, "O_RDWR") ||
           absl::StrContains(c.flags, "O_CREAT") || absl::StrContains(c.flags, "O_TRUNC");
  }
  return c.name != "stat";
}

// System files any process of ours may read (the dynamic loader, CPU topology, RocksDB's and
// gRPC's probes of the kernel), and the one place it may write outside its directories:
// the names of its own threads.
bool AllowedSystemPath(const Syscall& c) {
  static constexpr const char* kRead[] = {"/lib/",          "/lib64/",
                                          "/usr/lib/",      "/etc/ld.so.cache",
                                          "/etc/localtime", "/usr/share/zoneinfo/",
                                          "/sys/devices/",  "/proc/self/",
                                          "/proc/sys/",     "/proc/meminfo",
                                          "/dev/urandom",   "/dev/null"};
  if (absl::StartsWith(c.path, "/proc/self/task/") && absl::EndsWith(c.path, "/comm")) {
    return true;
  }
  if (Writes(c)) return false;
  for (const char* p : kRead) {
    if (absl::StartsWith(c.path, p)) return true;
  }
  return false;
}

}  // namespace

std::string FindStrace() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/strace");
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::vector<std::string> StraceArgs(const std::string& output_prefix) {
  return {FindStrace(),
          "-ff",
          "-ttt",
          "-T",
          "-y",
          "-s",
          "256",
          "-o",
          output_prefix,
          "-e",
          "trace=open,openat,creat,write,pwrite64,pwritev,writev,fsync,fdatasync,rename,"
          "renameat,renameat2,unlink,unlinkat,mkdir,mkdirat"};
}

bool ParseStraceLine(const std::string& line, int tid, Syscall* out) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || line.empty() || line.back() != '>') return false;
  const size_t paren = line.find('(', space);
  const size_t dur_open = line.rfind(" <");
  const size_t result = line.rfind(") = ", dur_open);
  if (paren == std::string::npos || dur_open == std::string::npos || result == std::string::npos ||
      result < paren) {
    return false;
  }
  Syscall c;
  c.tid = tid;
  if (!absl::SimpleAtod(line.substr(0, space), &c.start) ||
      !absl::SimpleAtod(line.substr(dur_open + 2, line.size() - dur_open - 3), &c.duration)) {
    return false;
  }
  c.name = line.substr(space + 1, paren - space - 1);
  if (c.name.find(' ') != std::string::npos) return false;
  c.failed = absl::StartsWith(absl::string_view(line).substr(result + 4), "-1");
  const absl::string_view args = absl::string_view(line).substr(paren + 1, result - paren - 1);
  size_t pos = 0;
  if (c.name == "open" || c.name == "creat" || c.name == "mkdir" || c.name == "unlink") {
    if (!args.empty() && args[0] == '"') c.path = ReadQuoted(args, &pos);
    if (c.name == "open") c.flags = ReadToken(args, &pos);
    if (c.name == "creat") c.flags = "O_CREAT|O_WRONLY|O_TRUNC";
  } else if (c.name == "openat" || c.name == "mkdirat" || c.name == "unlinkat") {
    const std::string dir = ReadFd(args, &pos);
    SkipSeparator(args, &pos);
    if (pos < args.size() && args[pos] == '"') c.path = Resolve(dir, ReadQuoted(args, &pos));
    if (c.name == "openat") c.flags = ReadToken(args, &pos);
  } else if (c.name == "rename") {
    if (!args.empty() && args[0] == '"') c.path = ReadQuoted(args, &pos);
    SkipSeparator(args, &pos);
    if (pos < args.size() && args[pos] == '"') c.path2 = ReadQuoted(args, &pos);
  } else if (c.name == "renameat" || c.name == "renameat2") {
    const std::string from_dir = ReadFd(args, &pos);
    SkipSeparator(args, &pos);
    if (pos < args.size() && args[pos] == '"') c.path = Resolve(from_dir, ReadQuoted(args, &pos));
    SkipSeparator(args, &pos);
    const std::string to_dir = ReadFd(args, &pos);
    SkipSeparator(args, &pos);
    if (pos < args.size() && args[pos] == '"') c.path2 = Resolve(to_dir, ReadQuoted(args, &pos));
  } else {
    c.path = ReadFd(args, &pos);  // write, pwrite64, fsync, fdatasync, ...: the descriptor.
  }
  *out = std::move(c);
  return true;
}

absl::StatusOr<std::vector<Syscall>> ReadStraceLogs(const std::string& prefix) {
  const std::filesystem::path p(prefix);
  std::vector<Syscall> calls;
  std::error_code ec;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    const std::string stem = p.filename().string() + ".";
    int tid = 0;
    if (!absl::StartsWith(name, stem) || !absl::SimpleAtoi(name.substr(stem.size()), &tid)) {
      continue;
    }
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    Syscall c;
    while (std::getline(in, line)) {
      if (ParseStraceLine(line, tid, &c)) calls.push_back(c);
    }
  }
  if (ec || files == 0) {
    return absl::NotFoundError(absl::StrCat("no strace logs ", prefix, ".<tid>"));
  }
  std::stable_sort(calls.begin(), calls.end(),
                   [](const Syscall& a, const Syscall& b) { return a.start < b.start; });
  return calls;
}

AuditReport Audit(const std::vector<Syscall>& calls, const AuditOptions& o) {
  AuditReport report;
  const std::string chunks = o.state_dir + "/chunks";
  const std::string states = o.state_dir + "/states";
  const std::string manifests = o.state_dir + "/manifests";
  const std::string catalog = o.state_dir + "/catalog";
  auto is_data = [&](const std::string& p) { return Parent(p) == chunks || Parent(p) == states; };
  auto is_wal = [&](const std::string& p) {
    return Parent(p) == catalog && absl::EndsWith(p, ".log");
  };
  auto violation = [&](std::string rule, const Syscall& at, std::string what) {
    report.violations.push_back(
        absl::StrFormat("%s at %.6f (%s %s): %s", rule, at.start, at.name, at.path, what));
  };

  struct FileState {
    double last_write = -1;
    double last_sync = -1;
  };
  struct Publish {
    double renamed = 0;
    int tid = 0;  // The thread that renamed the manifest into place.
    double dir_synced = -1;
    double catalog_synced = -1;
  };
  std::map<std::string, FileState> files;
  std::set<std::string> window;              // Data files written since the last publish.
  std::map<std::string, double> created_in;  // Directory -> its latest new entry.
  std::map<std::string, double> dir_synced;  // Directory -> its latest fsync's end.
  std::map<uint64_t, Publish> publishes;
  std::map<uint64_t, double> deletes;  // Id -> unlink time, until manifests/ is fsynced.
  double last_wal_write = -1;
  double last_wal_sync = -1;
  // P9 per thread too: thread -> its latest manifest operation (rename or unlink), and the
  // latest WAL sync already counted for one of its publishes or deletes. Publishes run on other
  // threads while a delete goes on, so another thread's rename may fall between a delete's
  // synced catalog write and its unlink, and the catalog's group commit may make one WAL sync
  // durable for a publish's write and a delete's; neither is an order violation of the delete.
  std::map<int, double> manifest_op_by;
  std::map<int, double> wal_used_by;
  // P9 per thread (a delete runs on one thread, while publishes go on concurrently on
  // others): thread -> when it last unlinked a manifest, and whether manifests/ was fsynced
  // after that unlink. Only such a thread may unlink chunk files; its next publish ends it.
  struct Deleting {
    double unlinked = 0;
    bool synced = false;
  };
  std::map<int, Deleting> deleting;

  auto manifest_id = [](const std::string& path, uint64_t* id) {
    std::string name = std::filesystem::path(path).filename().string();
    if (!absl::StartsWith(name, "m-") || !absl::EndsWith(name, ".manifest")) return false;
    name = name.substr(2, name.size() - 2 - 9);
    return absl::SimpleHexAtoi(name, id);
  };
  // P6: every earlier publish of a thread has its synced catalog write before that thread's
  // next manifest operation (another thread's delete may unlink a manifest between a publish's
  // manifests/ fsync and its catalog write; a publish never synced at all is reported at the
  // end, one acknowledged before its write under P7).
  auto check_catalog_written = [&](const Syscall& at) {
    for (auto& [id, p] : publishes) {
      if (p.tid == at.tid && p.catalog_synced < 0 && p.dir_synced >= 0) {
        violation("P6", at,
                  absl::StrCat("checkpoint ", id,
                               " has no synced catalog write "
                               "before the next manifest operation"));
        p.catalog_synced = 0;  // Reported once.
      }
    }
  };
  // P2 and P3 for the data files of the publish whose manifest is being written.
  auto check_data_durable = [&](const Syscall& at) {
    for (const std::string& f : window) {
      const FileState& s = files[f];
      if (s.last_sync < s.last_write) {
        violation("P2", at, absl::StrCat(f, " was not fsynced after its last write"));
      }
    }
    for (const auto& [dir, created] : created_in) {
      if (dir_synced[dir] < created) {
        violation("P3", at, absl::StrCat(dir, " was not fsynced after its new entry"));
      }
    }
  };

  for (const Syscall& c : calls) {
    // F2: every name the daemon uses.
    const bool names_a_file = c.name.rfind("open", 0) == 0 || c.name == "creat" ||
                              c.name.rfind("mkdir", 0) == 0 || c.name.rfind("rename", 0) == 0 ||
                              c.name.rfind("unlink", 0) == 0;
    if (names_a_file) {
      for (const std::string& raw : {c.path, c.path2}) {
        if (raw.empty()) continue;
        const std::string p = std::filesystem::path(raw).lexically_normal().string();
        if (Under(p, o.state_dir) || Under(p, o.runtime_dir)) continue;
        Syscall probe = c;
        probe.path = p;
        if (!AllowedSystemPath(probe)) {
          report.outside.push_back(absl::StrCat(c.name, " ", p, " ", c.flags));
        }
      }
    }
    if (c.failed) continue;

    if ((c.name == "open" || c.name == "openat" || c.name == "creat") &&
        absl::StrContains(c.flags, "O_CREAT") && is_data(c.path)) {
      created_in[Parent(c.path)] = std::max(created_in[Parent(c.path)], c.start);
    } else if (c.name == "write" || c.name == "pwrite64" || c.name == "pwritev" ||
               c.name == "writev") {
      if (is_data(c.path)) window.insert(c.path);
      if (is_wal(c.path)) last_wal_write = c.start;
      if (absl::EndsWith(c.path, ".manifest.tmp") && files[c.path].last_write < 0) {
        check_data_durable(c);
      }
      files[c.path].last_write = c.start;
    } else if (c.name == "fsync" || c.name == "fdatasync") {
      if (c.path == chunks || c.path == states || c.path == manifests || c.path == catalog ||
          c.path == o.state_dir || c.path == o.state_dir + "/quarantine") {
        ++report.directory_syncs;
        dir_synced[c.path] = c.end();
        if (c.path == manifests) {
          for (auto& [id, p] : publishes) {
            if (p.dir_synced < 0 && p.renamed < c.start) p.dir_synced = c.end();
          }
          deletes.clear();
          for (auto& [tid, d] : deleting) {
            if (d.unlinked <= c.start) d.synced = true;
          }
        }
      } else {
        if (files[c.path].last_write <= c.start) files[c.path].last_sync = c.end();
        // A WAL sync makes durable what was written since the previous one.
        if (is_wal(c.path) && last_wal_write > last_wal_sync && last_wal_write <= c.start) {
          last_wal_sync = c.end();
          for (auto& [id, p] : publishes) {
            if (p.dir_synced >= 0 && p.catalog_synced < 0 && last_wal_write >= p.dir_synced) {
              p.catalog_synced = c.end();
              wal_used_by[p.tid] = c.end();
            }
          }
        }
      }
    } else if (c.name.rfind("rename", 0) == 0) {
      uint64_t id = 0;
      if (Parent(c.path2) == manifests && manifest_id(c.path2, &id)) {
        ++report.publishes;
        // P1: written under a name no manifest lists (the writer's unique .tmp name).
        if (Parent(c.path) != manifests || !absl::EndsWith(c.path, ".manifest.tmp")) {
          violation("P4", c,
                    absl::StrCat("the manifest was renamed from ", c.path, " to ", c.path2,
                                 ", not from its .tmp name"));
        }
        const FileState& tmp = files[c.path];
        if (tmp.last_write < 0 || tmp.last_sync < tmp.last_write) {
          violation("P4", c, absl::StrCat(c.path, " was not fsynced before the rename"));
        }
        check_data_durable(c);
        check_catalog_written(c);
        publishes[id] = Publish{c.start, c.tid};
        window.clear();
        created_in.clear();
        manifest_op_by[c.tid] = c.start;
        deleting.erase(c.tid);
      } else if (is_data(c.path2)) {
        created_in[Parent(c.path2)] = std::max(created_in[Parent(c.path2)], c.start);
        window.insert(c.path2);
        files[c.path2] = files[c.path];
      }
    } else if (c.name.rfind("unlink", 0) == 0) {
      uint64_t id = 0;
      if (Parent(c.path) == manifests && manifest_id(c.path, &id)) {
        ++report.deletes;
        check_catalog_written(c);
        // A WAL sync after this thread's previous manifest operation, not yet counted for
        // another of its publishes or deletes.
        const auto op = manifest_op_by.find(c.tid);
        const auto used = wal_used_by.find(c.tid);
        if (last_wal_sync < 0 || (op != manifest_op_by.end() && last_wal_sync <= op->second) ||
            (used != wal_used_by.end() && last_wal_sync <= used->second) ||
            last_wal_sync > c.start) {
          violation("P9", c,
                    "the manifest was unlinked before its catalog entry was removed "
                    "with a synced write");
        }
        deletes[id] = c.start;
        wal_used_by[c.tid] = last_wal_sync;
        manifest_op_by[c.tid] = c.start;
        deleting[c.tid] = Deleting{c.start, false};
      } else if (Parent(c.path) == chunks) {
        auto d = deleting.find(c.tid);
        if (d == deleting.end()) {
          violation("P9", c,
                    absl::StrCat("a chunk file was unlinked by thread ", c.tid,
                                 ", which had removed no manifest since its last publish"));
        } else if (!d->second.synced) {
          violation("P9", c,
                    absl::StrCat("a chunk file was unlinked by thread ", c.tid,
                                 " before manifests/ was fsynced after its manifest unlink"));
        }
      }
    }
  }

  for (const auto& [id, p] : publishes) {
    if (p.dir_synced < 0) {
      report.violations.push_back(
          absl::StrCat("P5: checkpoint ", id, ": manifests/ never fsynced after the rename"));
    } else if (p.catalog_synced < 0) {  // 0: reported above.
      report.violations.push_back(absl::StrCat(
          "P6: checkpoint ", id, ": no synced catalog write after the manifests/ fsync"));
    }
  }
  for (const auto& [id, when] : o.acknowledged) {
    auto it = publishes.find(id);
    if (it == publishes.end()) {
      report.violations.push_back(
          absl::StrCat("P7: acknowledged checkpoint ", id, " was never published in this run"));
    } else if (it->second.catalog_synced < 0 || it->second.catalog_synced > when) {
      report.violations.push_back(absl::StrFormat(
          "P7: checkpoint %d acknowledged at %.6f before its catalog write was durable (%.6f)", id,
          when, it->second.catalog_synced));
    }
  }
  for (const auto& [id, when] : deletes) {
    report.violations.push_back(
        absl::StrCat("P9: checkpoint ", id, ": manifests/ never fsynced after the unlink"));
  }
  for (const auto& [id, when] : o.deleted) {
    (void)when;
    if (publishes.contains(id) && report.deletes == 0) {
      report.violations.push_back(absl::StrCat("P9: checkpoint ", id, " was never deleted"));
    }
  }
  return report;
}

}  // namespace cairn::audit
