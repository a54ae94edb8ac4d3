// cairn-infer: the inference daemon. Wiring only (style.md §2): options, the model, the slots,
// the cache client, the scheduler, the gRPC server, and an orderly drain on SIGTERM.

#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/concurrency/thread_pool.h"
#include "common/config/daemon_command_line.h"
#include "common/config/flags.h"
#include "common/config/runtime_dir.h"
#include "common/grpc/peer_address.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/log/log.h"
#include "common/net/unix_socket_path.h"
#include "services/infer/cache_client/grpc_state_cache.h"
#include "services/infer/daemon/infer_service.h"
#include "services/infer/daemon/served_model.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/models/load_progress_log.h"

namespace cairn::infer {
namespace {

// Exit statuses: 0 after a signal's drain, 2 for a bad command line or configuration (which
// systemd does not restart: RestartPreventExitStatus=2), 1 for other start-up failures, and this
// one after the model faulted while serving (docs/inference-daemon.md), which a supervisor
// answers by starting the daemon again (systemd's Restart=on-failure; tools/serve too).
constexpr int kExitFaulted = 3;

struct InferMainOptions {
  std::string listen;  // Default: unix:<runtime dir>/infer.sock.
  std::string cache;   // Empty: no cache daemon.
  int sessions = 1;
  int io_threads = 4;
  absl::Duration drain_timeout = absl::Seconds(10);
  std::string log_level = "info";
  std::string instance_name;
};

// Accepts "-j N" and "-jN" as --sessions.
std::vector<std::string> ExpandShortFlags(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-j" && i + 1 < argc) {
      args.push_back("--sessions=" + std::string(argv[++i]));
    } else if (a.size() > 2 && a.rfind("-j", 0) == 0) {
      args.push_back("--sessions=" + a.substr(2));
    } else {
      args.push_back(a);
    }
  }
  return args;
}

int Run(int argc, char** argv) {
  BlockTerminationSignals();
  InferMainOptions main_options;
  ServedModelOptions model_options;
  SchedulerOptions scheduler_options;
  scheduler_options.max_pass_tokens = 0;  // --max-pass-tokens' default: by the backend's memory.
  GrpcStateCacheOptions cache_options;
  InferServiceOptions service_options;
  int max_queued_calls = static_cast<int>(service_options.max_queued_calls);
  FlagSet flags("cairn-infer",
                "The Cairn inference daemon: a hybrid model, its execution slots and the cache "
                "protocol.");
  flags.Add("model", &model_options.dir,
            "Hugging Face model folder (config.json, safetensors, "
            "tokenizer.json, chat template)");
  flags.Add("served-model-name", &model_options.served_name,
            "model name reported to clients (default: the folder's name)");
  flags.Add("backend", &model_options.backend,
            absl::StrCat("kernel backend: ",
                         absl::StrJoin(cairn::infer::AvailableKernelBackends(), ", ")));
  flags.Add("numerics", &model_options.numerics,
            "fast (outputs exact for identical pass boundaries) or pass-invariant (exact "
            "whatever the restore point; slower prefill)");
  flags.Add("threads", &model_options.threads, "backend threads (0: one per hardware thread)", 0,
            kMaxThreadsFlag);
  flags.Add("cpu-spin-us", &model_options.cpu_spin_us,
            "cpu backend: microseconds a helper thread watches for the next loop before sleeping "
            "(0: sleep at once; watching saves a wake-up per loop and costs processor time)");
  flags.Add("gpu-bf16-inputs", &model_options.gpu_bf16_inputs,
            "hip backend: bf16 inputs to the matrix units (prefill GEMMs and attention, decode "
            "products; not under --numerics=pass-invariant); false keeps them fp32");
  flags.Add("gpu-moe-one-launch", &model_options.gpu_moe_one_launch,
            "hip backend: a MoE decode layer's routing, expert products and sum in one launch of "
            "blocks that wait on each other (the same outputs); false where another process "
            "shares the GPU's multiprocessors at the same time (MPS)");
  flags.Add("generation-config-defaults", &model_options.generation_config_defaults,
            "requests that leave sampling knobs to the model (the gateway's) take "
            "generation_config.json's temperature, top_k, top_p, min_p and repetition_penalty");
  flags.Add("special-tokens-as-text", &service_options.special_tokens_as_text,
            "chat messages' own text (contents, reasoning, tool-call arguments) and tool "
            "definitions encode special tokens' text as text, so a file holding \"<|im_end|>\" "
            "cannot end a turn; false parses them as the tokens, as transformers' "
            "apply_chat_template does");
  flags.Add("context", &model_options.context_tokens,
            "tokens per slot (0: max_position_embeddings, at most --max-context)", 0, kNoMax64);
  flags.Add("max-context", &model_options.max_context_tokens,
            "cap on the default context (slot memory grows with it)", 1, kNoMax64);
  flags.Add("sessions", &main_options.sessions, "execution slots (-j N)", 1, kNoMax);
  flags.Add("max-queue", &scheduler_options.max_queue,
            "requests waiting for a slot; more are refused (RESOURCE_EXHAUSTED)", 0, kNoMax);
  flags.Add("max-queued-calls", &max_queued_calls,
            "calls waiting for an --io-threads thread to validate, render and tokenize them; "
            "more are refused (RESOURCE_EXHAUSTED)",
            1, kNoMax);
  flags.Add("max-pass-tokens", &scheduler_options.max_pass_tokens,
            absl::StrCat("longest prefill pass (the cache plans with it too; 0: ", kHostPassTokens,
                         " where the backend computes in host memory, ", kDevicePassTokens,
                         " in a GPU's)"),
            0, kNoMax64);
  flags.Add("sampling-threads", &scheduler_options.sampling_threads,
            absl::StrCat("threads choosing a decode step's tokens side by side, the scheduler's "
                         "among them (0: one per hardware thread, at most ",
                         kMaxSamplingThreads, "; 1: the scheduler thread alone)"),
            0, kNoMax);
  flags.Add("preserve-frontier", &scheduler_options.preserve_frontier,
            "capture a slot's frontier before another conversation overwrites it");
  flags.Add("restore-in-holding-slot", &scheduler_options.restore_in_holding_slot,
            "run a restore in the idle slot that already holds the checkpoint's rows");
  flags.Add("holding-slot-cheapest", &scheduler_options.holding_slot_cheapest,
            "among slots holding the restore equally far, take the one that spills least");
  flags.Add("cheapest-slot", &scheduler_options.cheapest_slot,
            "with no slot to continue or holding the restore, take the idle slot whose "
            "overwrite spills least into the cache, not the least recently used");
  flags.Add("background-spill-bytes", &cache_options.background_spill_bytes,
            "idle spills copied in the background beside the compute, at most this many bytes "
            "in flight (0: only when no slot has work, one at a time)",
            0, kNoMax64);
  flags.Add("cache-rpc-timeout", &cache_options.rpc_timeout,
            "each call to the cache daemon; one past it (or failing in transport) ends the "
            "session, which then reconnects, so later requests do not wait for it too",
            absl::Milliseconds(1));
  flags.Add("cache-write-timeout", &cache_options.stream_write_timeout,
            "a write to the cache session stream outstanding this long (the cache daemon stopped "
            "reading) ends the session, which then reconnects",
            absl::Milliseconds(1));
  flags.Add("cache", &main_options.cache,
            "cache daemon address (unix:PATH or HOST:PORT; empty: serve without a cache)",
            ValidateOptionalPeerAddress);
  flags.Add("listen", &main_options.listen, "gRPC address: unix:PATH or HOST:PORT");
  flags.Add("instance-name", &main_options.instance_name, "name in the cache's events");
  flags.Add("io-threads", &main_options.io_threads, "threads preparing requests", 1,
            kMaxThreadsFlag);
  flags.Add("drain-timeout", &main_options.drain_timeout,
            "how long SIGTERM lets running requests finish before cancelling them",
            absl::ZeroDuration());
  flags.Add("log-level", &main_options.log_level, "info, warning or error");

  const std::vector<std::string> args = ExpandShortFlags(argc, argv);
  if (std::optional<int> exit_code =
          ParseDaemonCommandLine(flags, args, "cairn-infer", main_options.log_level)) {
    return *exit_code;
  }
  if (model_options.dir.empty()) {
    std::cerr << "cairn-infer: --model DIR is required\n";
    return 2;
  }
  if (main_options.listen.empty()) {
    const std::string runtime_dir = DefaultRuntimeDir();
    if (::mkdir(runtime_dir.c_str(), 0750) != 0 && errno != EEXIST) {
      CAIRN_LOG(ERROR) << "cannot create runtime directory " << runtime_dir;
      return 1;
    }
    main_options.listen = "unix:" + runtime_dir + "/infer.sock";
  }
  // The listen address is checked before the model loads (minutes for a large one), so that a
  // malformed address, or a socket another cairn-infer serves, fails at once. The server itself
  // starts once the model is loaded.
  absl::StatusOr<ListenAddress> listen = ParseListenAddress(main_options.listen);
  if (!listen.ok()) {
    std::cerr << "cairn-infer: --listen: " << listen.status().message() << "\n";
    return 2;
  }
  if (listen->is_unix) {
    if (absl::Status s = PrepareUnixSocketPath(listen->path); !s.ok()) {
      CAIRN_LOG(ERROR) << "--listen: " << s;
      return 1;
    }
  }

  service_options.max_queued_calls = static_cast<size_t>(max_queued_calls);
  ThreadPool pool(main_options.io_threads);
  ServerRunnerOptions server_options;
  server_options.listen = main_options.listen;
  server_options.drain_timeout = main_options.drain_timeout;
  server_options.health_services = {"cairn.infer.v1.InferService"};
  server_options.max_receive_message_bytes = 64 * 1024 * 1024;  // Long token-id prompts.

  CAIRN_LOG(INFO) << "loading " << model_options.dir;
  // Loading and slot allocation can take minutes and hold nothing a drain would release.
  std::optional<ExitOnTerminationSignal> exit_during_load;
  exit_during_load.emplace("the model's load");
  // Minutes of hashing and placing a large model's weights show their progress in the log and
  // as the unit's status, each step extending systemd's start timeout while the load moves.
  LoadProgressLogOptions progress_options;
  progress_options.write = [](const std::string& line) { CAIRN_LOG(INFO) << line; };
  progress_options.notify = [](const std::string& state) { sd_notify(0, state.c_str()); };
  LoadProgressLog load_log(std::move(progress_options));
  model_options.load.progress = load_log.AsFunction();
  const absl::Time load_start = absl::Now();
  absl::StatusOr<std::unique_ptr<ServedModel>> served = ServedModel::Load(model_options);
  if (!served.ok()) {
    CAIRN_LOG(ERROR) << "loading the model: " << served.status();
    return 1;
  }
  Model* model = (*served)->model();
  const bool default_pass = scheduler_options.max_pass_tokens == 0;
  scheduler_options.max_pass_tokens =
      PassTokensFor(scheduler_options.max_pass_tokens, *(*served)->device_memory());
  // Host slot memory is zero-filled at once: more than the machine holds would end in the
  // OOM killer (or swap) instead of an error.
  const double slot_bytes = static_cast<double>(model->state_layout().row_bytes()) *
                                static_cast<double>((*served)->context_tokens()) +
                            static_cast<double>(model->state_layout().private_bytes());
  const double ram_bytes =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if ((*served)->device_memory()->host_visible() && ram_bytes > 0 &&
      slot_bytes * main_options.sessions > ram_bytes) {
    std::cerr << "cairn-infer: --sessions " << main_options.sessions << " slots of "
              << (*served)->context_tokens() << " tokens (--context) need "
              << static_cast<uint64_t>(slot_bytes * main_options.sessions)
              << " bytes of slot memory, more than this machine's "
              << static_cast<uint64_t>(ram_bytes) << " bytes of RAM\n";
    return 2;
  }
  SlotKvMemoryOptions memory_options;
  memory_options.slots = main_options.sessions;
  memory_options.max_rows = (*served)->context_tokens();
  memory_options.memory = (*served)->device_memory();
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
      SlotKvMemory::Create(model->state_layout(), memory_options);
  if (!memory.ok()) {
    CAIRN_LOG(ERROR) << "allocating slots: " << memory.status();
    return 1;
  }
  if (!(*served)->device_memory()->host_visible()) {
    // The device scratch of the longest pass, taken now: a device without the memory for it
    // stops the daemon here, naming the flags that shrink it, instead of failing requests.
    const absl::Time reserve_start = absl::Now();
    if (absl::Status s = ReservePassMemory(*model, **memory, scheduler_options.max_pass_tokens);
        !s.ok()) {
      CAIRN_LOG(ERROR) << "reserving device memory for prefill passes: " << s
                       << " (lower --max-pass-tokens"
                       << (default_pass
                               ? absl::StrCat(", by default ", scheduler_options.max_pass_tokens,
                                              " on a GPU,")
                               : std::string(","))
                       << " --sessions or --context)";
      return 1;
    }
    CAIRN_LOG(INFO) << "device memory for prefill passes of up to "
                    << scheduler_options.max_pass_tokens << " tokens taken in "
                    << absl::ToDoubleSeconds(absl::Now() - reserve_start) << " s";
  }
  CAIRN_LOG(INFO) << "loaded " << model->info().architecture << " (" << model->info().num_parameters
                  << " parameters) in " << absl::ToDoubleSeconds(absl::Now() - load_start) << " s; "
                  << main_options.sessions << " slots of " << (*served)->context_tokens()
                  << " tokens";

  exit_during_load.reset();  // From here a signal drains (WaitForTerminationSignal).

  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<GrpcStateCache> cache;
  if (!main_options.cache.empty()) {
    const CompatibilityIdentity& id = (*served)->identity();
    cache_options.address = main_options.cache;
    cache_options.instance_name = main_options.instance_name.empty()
                                      ? absl::StrCat("cairn-infer-", ::getpid())
                                      : main_options.instance_name;
    cache_options.slots = main_options.sessions;
    cache_options.max_pass_tokens = scheduler_options.max_pass_tokens;
    cache_options.device_memory = (*served)->device_memory();
    cache_options.model_name = (*served)->name();
    cache_options.identity.set_digest(id.digest);
    cache_options.identity.set_architecture(id.architecture);
    cache_options.identity.set_weights_digest(id.weights_digest);
    cache_options.identity.set_tokenizer_digest(id.tokenizer_digest);
    cache_options.identity.set_template_digest(id.template_digest);
    cache_options.identity.set_layout_digest(id.layout_digest);
    cache_options.identity.set_numerics_class(id.numerics_class);
    cache_options.identity.set_speculative_config(id.speculative_config);
    cache_options.identity.set_config_digest(id.config_digest);
    cache_options.layout = model->state_layout();
    cache = std::make_unique<GrpcStateCache>(cache_options, [&scheduler] {
      if (scheduler != nullptr) scheduler->Wake();
    });
  }
  // A model that faults (its device lost; the HIP backend's first error) can serve nothing
  // more: the scheduler has ended every request with UNAVAILABLE, and the daemon drains and
  // exits with kExitFaulted as if stopped, for systemd (Restart=on-failure) to start it afresh
  // with the cache daemon's checkpoints still there. The signal goes to the process, where main's
  // WaitForTerminationSignal takes it.
  std::atomic<bool> faulted{false};
  scheduler_options.on_fault = [&faulted](const absl::Status& fault) {
    faulted.store(true);
    CAIRN_LOG(ERROR) << "the model faulted, so cairn-infer exits to be restarted: " << fault;
    sd_notify(0, absl::StrCat("STATUS=faulted: ", fault.message()).c_str());
    ::kill(::getpid(), SIGTERM);
  };
  scheduler = std::make_unique<Scheduler>(model, memory->get(), cache.get(), scheduler_options);
  scheduler->Start();
  InferServiceImpl service(
      served->get(), scheduler.get(), &pool,
      [&cache] { return cache != nullptr && cache->connected(); }, service_options);
  absl::StatusOr<std::unique_ptr<ServerRunner>> server =
      ServerRunner::Start(server_options, {&service});
  if (!server.ok()) {
    CAIRN_LOG(ERROR) << "starting the gRPC server: " << server.status();
    scheduler->Shutdown(absl::Now());
    return 1;
  }
  (*server)->SetAllServing(true);
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=serving ", (*served)->name()).c_str());
  CAIRN_LOG(INFO) << "cairn-infer serving " << (*served)->name() << " on " << (*server)->address()
                  << (cache != nullptr ? absl::StrCat(", cache at ", main_options.cache)
                                       : std::string(", no cache"));

  const int sig = WaitForTerminationSignal();
  // Shutdown order (style.md §5): health NOT_SERVING, drain (running requests finish or are
  // cancelled at the deadline), server shutdown, then the scheduler and the cache client.
  if (faulted.load()) {
    CAIRN_LOG(INFO) << "the model faulted: draining";
  } else {
    CAIRN_LOG(INFO) << "signal " << sig << ": draining";
  }
  sd_notify(0, "STOPPING=1");
  const absl::Time deadline = absl::Now() + main_options.drain_timeout;
  (*server)->SetAllServing(false);
  scheduler->Shutdown(deadline);
  (*server)->Drain();
  (*server)->Wait();
  pool.Shutdown();
  if (cache != nullptr) cache->Shutdown();
  server->reset();
  CAIRN_LOG(INFO) << "cairn-infer stopped";
  return faulted.load() ? kExitFaulted : 0;
}

}  // namespace
}  // namespace cairn::infer

int main(int argc, char** argv) { return cairn::infer::Run(argc, argv); }
