// cairn-seed-table: the seed's table on a model of your choice, through the real daemons.
//
// For each prompt length it runs one conversation through cairn-infer and cairn-cache (started
// here as child processes) and reports the time to first token of:
//   cold  the first turn, prefilled from nothing;
//   live  the next turn, continuing the state still in the slot;
//   ram   the turn after another conversation used the only slot (restore from the arena);
//   disk  the turn after both daemons restarted (restore from the disk tier).
// Each row breaks out restore and capture time, the tokens restored and prefilled, and the
// restore throughput against the memcpy and cold sequential-read bandwidth measured in the same
// run.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/config/flags.h"
#include "common/grpc/client.h"
#include "common/process/child_process.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::bench {
namespace {

namespace iv1 = ::cairn::infer::v1;
namespace cv1 = ::cairn::cache::v1;

struct Options {
  std::string model;  // Empty: a random model of `preset`.
  std::string preset = "bench-50m";
  std::vector<std::string> lengths = {"2048", "8192", "32768"};
  std::string bin_dir = CAIRN_BINARY_DIR;
  std::string work_dir;  // Empty: a fresh folder under /tmp.
  int threads = 0;
  int64_t suffix_tokens = 40;  // Each later turn adds about a sentence.
  int gen_tokens = 8;
  std::string cache_ram = "8Gi";
  std::string json;  // Also write the results here.
  int64_t bandwidth_bytes = 512 << 20;
};

struct Row {
  int64_t length = 0;
  std::string tier;
  double ttft_ms = 0;
  double restore_ms = 0;
  double capture_ms = 0;
  int64_t restored = 0;
  int64_t prefilled = 0;
  double restore_gbps = 0;
};

double GBps(double bytes, double ms) { return ms > 0 ? bytes / (ms * 1e6) : 0; }

// memcpy bandwidth over `bytes` (the best of three copies).
double MemcpyGBps(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes));
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const absl::Time t0 = absl::Now();
    std::memcpy(b.data(), a.data(), a.size());
    best = std::max(best,
                    GBps(static_cast<double>(bytes), absl::ToDoubleMilliseconds(absl::Now() - t0)));
  }
  // Keep the copy observable.
  volatile char sink = b[static_cast<size_t>(bytes / 2)];
  (void)sink;
  return best;
}

// Sequential read bandwidth of a file of `bytes` with the page cache dropped first (1 MiB
// reads, as the disk tier stages them).
double ColdReadGBps(const std::string& dir, int64_t bytes) {
  const std::string path = dir + "/seqread.bin";
  std::vector<char> buf(1 << 20, 7);
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return 0;
  for (int64_t done = 0; done < bytes; done += static_cast<int64_t>(buf.size())) {
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) break;
  }
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const absl::Time t0 = absl::Now();
  int64_t total = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += n;
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  ::close(fd);
  std::filesystem::remove(path);
  return GBps(static_cast<double>(total), ms);
}

std::vector<uint32_t> RandomIds(int64_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> out(static_cast<size_t>(n));
  for (uint32_t& id : out) id = static_cast<uint32_t>(rng() % vocab);
  return out;
}

class Harness {
 public:
  Harness(const Options& o, std::string dir, int64_t context)
      : o_(o), dir_(std::move(dir)), max_context_(context) {
    cache_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            o.bin_dir + "/services/cache/cairn-cache", "--listen=unix:" + dir_ + "/cache.sock",
            "--arena-socket=" + dir_ + "/arena.sock", "--cache-ram-bytes=" + o.cache_ram,
            "--cache-disk=" + dir_ + "/disk", "--cache-disk-bytes=64Gi", "--log-level=warning"},
        "unix:" + dir_ + "/cache.sock");
    infer_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            o.bin_dir + "/services/infer/daemon/cairn-infer", "--model=" + o.model, "--sessions=1",
            "--cache=unix:" + dir_ + "/cache.sock", "--listen=unix:" + dir_ + "/infer.sock",
            "--threads=" + std::to_string(o.threads), "--context=" + std::to_string(max_context_),
            "--log-level=warning"},
        "unix:" + dir_ + "/infer.sock");
  }
  absl::Status StartAll() {
    RETURN_IF_ERROR(cache_->Start());
    RETURN_IF_ERROR(cache_->WaitServing(absl::Seconds(60)));
    RETURN_IF_ERROR(infer_->Start());
    RETURN_IF_ERROR(infer_->WaitServing(absl::Minutes(5)));
    stub_ = iv1::InferService::NewStub(NewLocalChannel(infer_->address()));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(2));
      iv1::GetModelInfoResponse info;
      if (stub_->GetModelInfo(ctx.get(), {}, &info).ok() && info.cache_connected()) {
        vocab_ = info.vocab_size();
        row_bytes_ = info.bytes_per_row();
        private_bytes_ = info.private_state_bytes();
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(50));  // Polling the cache session of another process.
    }
    return absl::DeadlineExceededError("cairn-infer never connected to the cache");
  }
  void KillAll() {
    infer_->Kill();
    cache_->Kill();
  }
  // Waits until no checkpoint borrows slot rows, then until queued disk writes are done.
  absl::Status Settle() {
    auto stub = cv1::CacheService::NewStub(NewLocalChannel(cache_->address()));
    const absl::Time deadline = absl::Now() + absl::Minutes(2);
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(5));
      cv1::ListCheckpointsResponse list;
      if (!stub->ListCheckpoints(ctx.get(), {}, &list).ok()) break;
      bool borrowed = false;
      for (const auto& c : list.checkpoints()) borrowed |= c.borrowed();
      if (!borrowed) break;
      absl::SleepFor(absl::Milliseconds(50));  // Polling the idle spill.
    }
    auto ctx = NewClientContext(absl::Minutes(5));
    cv1::FlushResponse unused;
    grpc::Status st = stub->Flush(ctx.get(), {}, &unused);
    return st.ok() ? absl::OkStatus() : absl::UnavailableError(st.error_message());
  }

  // One turn: returns the cache report and the generated tokens.
  absl::StatusOr<std::pair<iv1::Finished, std::vector<uint32_t>>> Turn(
      const std::vector<uint32_t>& prompt, const std::string& conversation) {
    iv1::GenerateRequest req;
    for (uint32_t id : prompt) req.mutable_token_ids()->add_ids(id);
    req.mutable_sampling()->set_max_tokens(static_cast<uint32_t>(o_.gen_tokens));
    req.mutable_sampling()->set_ignore_eos(true);
    req.set_conversation(conversation);
    auto ctx = NewClientContext(absl::Minutes(30));
    auto reader = stub_->Generate(ctx.get(), req);
    iv1::GenerateResponse m;
    iv1::Finished finished;
    std::vector<uint32_t> tokens;
    while (reader->Read(&m)) {
      if (m.has_delta())
        tokens.insert(tokens.end(), m.delta().token_ids().begin(), m.delta().token_ids().end());
      if (m.has_finished()) finished = m.finished();
    }
    grpc::Status st = reader->Finish();
    if (!st.ok()) return absl::InternalError(st.error_message());
    return std::make_pair(finished, tokens);
  }

  uint32_t vocab() const { return vocab_; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t private_bytes() const { return private_bytes_; }

 private:
  const Options& o_;
  const std::string dir_;
  const int64_t max_context_;
  std::unique_ptr<ChildProcess> cache_;
  std::unique_ptr<ChildProcess> infer_;
  std::unique_ptr<iv1::InferService::Stub> stub_;
  uint32_t vocab_ = 0;
  uint64_t row_bytes_ = 0;
  uint64_t private_bytes_ = 0;
};

// Runs the four turns at one prompt length.
absl::StatusOr<std::vector<Row>> RunLength(const Options& o, const std::string& dir,
                                           int64_t length) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int64_t context = length + 4 * (o.suffix_tokens + o.gen_tokens) + 512;
  Harness h(o, dir, context);
  RETURN_IF_ERROR(h.StartAll());
  std::vector<Row> rows;
  auto row = [&](const std::string& tier, const iv1::Finished& f) {
    Row r;
    r.length = length;
    r.tier = tier;
    r.ttft_ms = f.cache().ttft_ms();
    r.restore_ms = f.cache().restore_ms();
    r.capture_ms = f.cache().capture_ms();
    r.restored = static_cast<int64_t>(f.cache().restored_depth());
    r.prefilled = static_cast<int64_t>(f.cache().prefilled_tokens());
    if (tier == "ram" || tier == "disk") {
      const double bytes = static_cast<double>(r.restored) * static_cast<double>(h.row_bytes()) +
                           static_cast<double>(h.private_bytes());
      r.restore_gbps = GBps(bytes, r.restore_ms);
    }
    std::cerr << absl::StrFormat(
        "  %6d %-5s ttft %9.1f ms (restore %7.1f, capture %6.1f), "
        "restored %d, prefilled %d\n",
        length, tier, r.ttft_ms, r.restore_ms, r.capture_ms, r.restored, r.prefilled);
    rows.push_back(r);
  };
  std::vector<uint32_t> prompt = RandomIds(length, h.vocab(), 1000 + length);
  auto next_turn = [&](const std::vector<uint32_t>& answer, uint64_t seed) {
    prompt.insert(prompt.end(), answer.begin(), answer.end());
    const std::vector<uint32_t> more = RandomIds(o.suffix_tokens, h.vocab(), seed);
    prompt.insert(prompt.end(), more.begin(), more.end());
  };
  ASSIGN_OR_RETURN(auto cold, h.Turn(prompt, "A"));
  row("cold", cold.first);
  next_turn(cold.second, 1);
  ASSIGN_OR_RETURN(auto live, h.Turn(prompt, "A"));
  row("live", live.first);
  // Another conversation takes the only slot.
  ASSIGN_OR_RETURN(auto other, h.Turn(RandomIds(256, h.vocab(), 7), "B"));
  (void)other;
  next_turn(live.second, 2);
  ASSIGN_OR_RETURN(auto ram, h.Turn(prompt, "A"));
  row("ram", ram.first);
  RETURN_IF_ERROR(h.Settle());
  h.KillAll();
  RETURN_IF_ERROR(h.StartAll());
  next_turn(ram.second, 3);
  ASSIGN_OR_RETURN(auto disk, h.Turn(prompt, "A"));
  row("disk", disk.first);
  h.KillAll();
  return rows;
}

int Run(int argc, char** argv) {
  Options o;
  FlagSet flags("cairn-seed-table",
                "The seed's table through the real daemons: time to first token of a cold "
                "prefill, a live continuation, a restore from RAM after another conversation "
                "used the slot, and a restore from disk after both daemons restarted.");
  flags.Add("model", &o.model, "model folder (empty: a random model of --preset)");
  flags.Add("preset", &o.preset, "random-checkpoint preset when --model is empty");
  flags.Add("lengths", &o.lengths, "prompt lengths in tokens (comma-separated)");
  flags.Add("bin-dir", &o.bin_dir, "the build tree holding cairn-cache and cairn-infer");
  flags.Add("work-dir", &o.work_dir, "scratch folder (sockets, disk tier, random model)");
  flags.Add("threads", &o.threads, "cairn-infer backend threads (0: all)");
  flags.Add("suffix-tokens", &o.suffix_tokens, "tokens each later turn adds");
  flags.Add("gen-tokens", &o.gen_tokens, "tokens generated per turn");
  flags.Add("cache-ram", &o.cache_ram, "cairn-cache --cache-ram-bytes");
  flags.Add("json", &o.json, "also write the results to this file");
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(argc, argv);
  if (absl::IsCancelled(rest.status())) {
    std::cout << rest.status().message();
    return 0;
  }
  if (!rest.ok() || !rest->empty()) {
    std::cerr << "cairn-seed-table: "
              << (rest.ok() ? "unexpected argument" : rest.status().message()) << "\n";
    return 2;
  }
  if (o.work_dir.empty()) o.work_dir = absl::StrCat("/tmp/cairn-seed-table-", ::getpid());
  std::filesystem::create_directories(o.work_dir);
  if (o.model.empty()) {
    absl::StatusOr<infer::RandomCheckpointOptions> preset = infer::RandomCheckpointPreset(o.preset);
    if (!preset.ok()) {
      std::cerr << "cairn-seed-table: " << preset.status() << "\n";
      return 2;
    }
    o.model = o.work_dir + "/model";
    if (absl::Status s = infer::WriteRandomCheckpoint(o.model, *preset); !s.ok()) {
      std::cerr << "cairn-seed-table: " << s << "\n";
      return 1;
    }
  }
  std::cerr << "measuring memcpy and cold sequential-read bandwidth...\n";
  const double memcpy_gbps = MemcpyGBps(o.bandwidth_bytes);
  const double read_gbps = ColdReadGBps(o.work_dir, o.bandwidth_bytes);
  std::vector<Row> all;
  for (const std::string& l : o.lengths) {
    int64_t length = 0;
    if (!absl::SimpleAtoi(l, &length) || length < 16) {
      std::cerr << "cairn-seed-table: bad length " << l << "\n";
      return 2;
    }
    std::cerr << "length " << length << ":\n";
    absl::StatusOr<std::vector<Row>> rows = RunLength(o, o.work_dir + "/run", length);
    if (!rows.ok()) {
      std::cerr << "cairn-seed-table: " << rows.status() << "\n";
      return 1;
    }
    all.insert(all.end(), rows->begin(), rows->end());
  }
  std::cout << absl::StrFormat("memcpy %.2f GB/s, cold sequential read %.2f GB/s\n\n", memcpy_gbps,
                               read_gbps);
  std::cout << "| tokens | state from | TTFT ms | restore ms | capture ms | restored | prefilled "
               "| restore GB/s | vs memcpy | vs cold read |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n";
  nlohmann::json j = {{"memcpy_gbps", memcpy_gbps},
                      {"cold_read_gbps", read_gbps},
                      {"rows", nlohmann::json::array()}};
  for (const Row& r : all) {
    std::cout << absl::StrFormat(
        "| %d | %s | %.1f | %.1f | %.1f | %d | %d | %s | %s | %s |\n", r.length, r.tier, r.ttft_ms,
        r.restore_ms, r.capture_ms, r.restored, r.prefilled,
        r.restore_gbps > 0 ? absl::StrFormat("%.2f", r.restore_gbps) : "",
        r.tier == "ram" ? absl::StrFormat("%.2f", r.restore_gbps / memcpy_gbps) : "",
        r.tier == "disk" ? absl::StrFormat("%.2f", r.restore_gbps / read_gbps) : "");
    j["rows"].push_back({{"tokens", r.length},
                         {"tier", r.tier},
                         {"ttft_ms", r.ttft_ms},
                         {"restore_ms", r.restore_ms},
                         {"capture_ms", r.capture_ms},
                         {"restored", r.restored},
                         {"prefilled", r.prefilled},
                         {"restore_gbps", r.restore_gbps}});
  }
  if (!o.json.empty()) std::ofstream(o.json) << j.dump(2) << "\n";
  std::filesystem::remove_all(o.work_dir + "/run");
  return 0;
}

}  // namespace
}  // namespace cairn::bench

int main(int argc, char** argv) { return cairn::bench::Run(argc, argv); }
