#include "tests/integration/services/gateway/live_daemons.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/grpc/client.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace cairn::gateway::testing {

std::string BuiltBinary(const std::string& relative) {
  return absl::StrCat(CAIRN_BINARY_DIR, "/", relative);
}

absl::StatusOr<std::unique_ptr<LiveDaemons>> LiveDaemons::Start(const LiveDaemonsOptions& o) {
  std::unique_ptr<LiveDaemons> d(new LiveDaemons());
  const char* tmp = std::getenv("TMPDIR");
  // Unix socket paths are short (108 bytes): a short directory under /tmp.
  d->dir_ = absl::StrCat(tmp != nullptr && std::string(tmp).size() < 40 ? tmp : "/tmp",
                         "/cairn-gw-", getpid());
  std::error_code ec;
  std::filesystem::remove_all(d->dir_, ec);
  std::filesystem::create_directories(d->dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", d->dir_, ": ", ec.message()));
  const std::string model = d->dir_ + "/model";
  const std::string make =
      absl::StrCat(BuiltBinary("services/infer/run/cairn-make-model"),
                   " --preset=dense --out=", model, " > ", d->dir_, "/make-model.log 2>&1");
  if (std::system(make.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cairn-make-model failed; see ", d->dir_));
  }
  std::vector<std::string> infer_argv = {BuiltBinary("services/infer/daemon/cairn-infer"),
                                         "--model=" + model,
                                         "--sessions=" + std::to_string(o.slots),
                                         "--max-queue=" + std::to_string(o.max_queue),
                                         "--listen=unix:" + d->dir_ + "/infer.sock",
                                         "--threads=2",
                                         "--context=" + std::to_string(o.context),
                                         "--max-pass-tokens=" + std::to_string(o.max_pass_tokens),
                                         "--log-level=warning"};
  if (o.cache) {
    d->cache_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuiltBinary("services/cache/cairn-cache"),
                                 "--listen=unix:" + d->dir_ + "/cache.sock",
                                 "--arena-socket=" + d->dir_ + "/arena.sock",
                                 "--cache-ram-bytes=64Mi", "--log-level=warning"},
        "unix:" + d->dir_ + "/cache.sock");
    RETURN_IF_ERROR(d->cache_->Start());
    RETURN_IF_ERROR(d->cache_->WaitServing(absl::Seconds(30)));
    infer_argv.push_back("--cache=unix:" + d->dir_ + "/cache.sock");
  }
  d->infer_ = std::make_unique<ChildProcess>(infer_argv, "unix:" + d->dir_ + "/infer.sock");
  RETURN_IF_ERROR(d->infer_->Start());
  RETURN_IF_ERROR(d->infer_->WaitServing(absl::Seconds(60)));
  d->stub_ = infer::v1::InferService::NewStub(NewLocalChannel(d->infer_->address()));
  if (!o.cache) return d;
  // The first request should already use the cache: wait for the session.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    auto ctx = NewClientContext(absl::Seconds(2));
    infer::v1::GetModelInfoResponse info;
    if (d->stub_->GetModelInfo(ctx.get(), {}, &info).ok() && info.cache_connected()) return d;
    absl::SleepFor(absl::Milliseconds(50));  // Polling another process's connection.
  }
  return absl::DeadlineExceededError("cairn-infer never connected to the cache");
}

LiveDaemons::~LiveDaemons() {
  if (infer_) infer_->Terminate();
  if (cache_) cache_->Terminate();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::StatusOr<infer::v1::ListSlotsResponse> LiveDaemons::ListSlots() const {
  auto ctx = NewClientContext(absl::Seconds(5));
  infer::v1::ListSlotsResponse slots;
  grpc::Status s = stub_->ListSlots(ctx.get(), {}, &slots);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("ListSlots: ", s.error_message()));
  return slots;
}

absl::StatusOr<ProcessUsage> UsageOf(pid_t pid) {
  ProcessUsage u;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  if (!status) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      v = absl::StripAsciiWhitespace(v);
      absl::ConsumeSuffix(&v, " kB");
      int64_t kb = 0;
      if (!absl::SimpleAtoi(v, &kb)) return absl::InternalError("unreadable VmRSS");
      u.rss_bytes = kb * 1024;
    }
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++u.fds;
  }
  if (ec) return absl::InternalError(absl::StrCat("listing descriptors: ", ec.message()));
  return u;
}

absl::StatusOr<int> ListeningPort(pid_t pid) {
  // The socket inodes among the process's descriptors ("socket:[12345]").
  std::set<std::string> inodes;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::error_code link_ec;
    absl::string_view target;
    const std::string link = std::filesystem::read_symlink(it->path(), link_ec).string();
    target = link;
    if (!link_ec && absl::ConsumePrefix(&target, "socket:[") && absl::ConsumeSuffix(&target, "]")) {
      inodes.insert(std::string(target));
    }
  }
  // /proc/PID/net/tcp: "sl local_address rem_address st ... inode", addresses as HEX:HEXPORT,
  // state 0A = LISTEN.
  std::ifstream tcp(absl::StrCat("/proc/", pid, "/net/tcp"));
  std::string line;
  std::getline(tcp, line);  // The header.
  while (std::getline(tcp, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 10 || f[3] != "0A" || inodes.count(f[9]) == 0) continue;
    const size_t colon = f[1].find(':');
    int port = 0;
    if (colon != std::string::npos && absl::SimpleHexAtoi(f[1].substr(colon + 1), &port)) {
      return port;
    }
  }
  return absl::NotFoundError(absl::StrCat("process ", pid, " listens on no TCP port"));
}

}  // namespace cairn::gateway::testing
