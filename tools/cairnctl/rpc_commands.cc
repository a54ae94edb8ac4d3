// cairnctl's online verbs: grpcurl-style `list`, `describe` and `call` (JSON in and out through
// the protobuf JSON mapping, over server reflection for names), and friendly verbs over the
// cache daemon (`status`, `checkpoints`, `tree`, `events`, `evict`, `flush`).

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/notification.h"
#include "common/config/flags.h"
#include "common/grpc/client.h"
#include "common/grpc/peer_address.h"
#include "common/status/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tools/cairnctl/command.h"
#include "tools/cairnctl/rpc_util.h"
#include "tools/cairnctl/verb_flags.h"

namespace cairn::cairnctl {

namespace cv1 = ::cairn::cache::v1;
namespace pb = ::google::protobuf;

// The default address of the cache daemon: the socket tools/serve and the unit use.
std::string DefaultCacheAddress() {
  if (const char* d = std::getenv("CAIRN_CACHE_ADDR"); d != nullptr && *d != '\0') return d;
  if (const char* d = std::getenv("CAIRN_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat("unix:", d, "/cache.sock");
  }
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat("unix:", d, "/cairn/cache.sock");
  }
  return absl::StrCat("unix:/tmp/cairn-", ::getuid(), "/cache.sock");
}

std::vector<std::string> ParseFlags(FlagSet& flags, CommonFlags& common,
                                    const std::vector<std::string>& args, std::ostream& out,
                                    std::ostream& err, int* exit_code, size_t max_positionals) {
  if (common.addr.empty()) common.addr = DefaultCacheAddress();
  flags.Add("addr", &common.addr, "daemon address: unix:PATH or HOST:PORT", ValidatePeerAddress);
  flags.Add("timeout", &common.timeout, "deadline of each call", kMinCallTimeout, kMaxCallTimeout);
  flags.Add("json", &common.json, "print JSON instead of tables");
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
  *exit_code = -1;
  if (absl::IsCancelled(rest.status())) {
    out << rest.status().message();
    *exit_code = 0;
    return {};
  }
  if (!rest.ok()) {
    err << "cairnctl: " << rest.status().message() << "\n";
    *exit_code = 2;
    return {};
  }
  if (rest->size() > max_positionals) {
    err << "cairnctl: unexpected argument '" << (*rest)[max_positionals] << "' (see --help)\n";
    *exit_code = 2;
    return {};
  }
  // A given --addr was checked as it was parsed; the default comes from the environment.
  absl::Status addr = flags.WasSet("addr") ? absl::OkStatus() : ValidatePeerAddress(common.addr);
  if (!addr.ok()) {
    err << "cairnctl: default --addr (from CAIRN_CACHE_ADDR, CAIRN_INFER_ADDR or the runtime "
           "directory): "
        << addr.message() << "\n";
    *exit_code = 2;
    return {};
  }
  return *rest;
}

std::string ToJson(const pb::Message& m) {
  std::string out;
  pb::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  if (!pb::util::MessageToJsonString(m, &out, options).ok()) return "{}";
  return out;
}

int Fail(std::ostream& err, const grpc::Status& s) {
  err << "cairnctl: " << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))
      << ": " << s.error_message();
  // gRPC's answer for a service the server lacks has no text: most often --addr names the other
  // daemon's socket (the cache's verbs sent to cairn-infer, or the reverse).
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty()) {
    err << "the daemon does not serve this method (is --addr the right daemon's socket? "
           "'cairnctl list --addr ...' shows what it serves)";
  }
  err << "\n";
  return 1;
}

namespace {

std::string Bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / double(uint64_t{1} << 30));
  if (b >= (uint64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / double(1 << 20));
  if (b >= 1024) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

std::string TierName(cv1::Tier t) {
  switch (t) {
    case cv1::TIER_LIVE:
      return "live";
    case cv1::TIER_RAM:
      return "ram";
    case cv1::TIER_DISK:
      return "disk";
    default:
      return "none";
  }
}

// ---------------------------------------------------------------------------------------
// Reflection: the server's file descriptors, in a pool of our own.

class ReflectionClient {
 public:
  explicit ReflectionClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
      : stub_(grpc::reflection::v1alpha::ServerReflection::NewStub(channel)), timeout_(timeout) {}

  absl::StatusOr<std::vector<std::string>> ListServices() {
    grpc::reflection::v1alpha::ServerReflectionRequest req;
    req.set_list_services("");
    std::vector<std::string> names;
    ASSIGN_OR_RETURN(grpc::reflection::v1alpha::ServerReflectionResponse resp, Ask(req));
    for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
    return names;
  }

  // Loads the file defining `symbol` and its dependencies into the pool; returns the pool.
  absl::StatusOr<const pb::DescriptorPool*> LoadSymbol(const std::string& symbol) {
    grpc::reflection::v1alpha::ServerReflectionRequest req;
    req.set_file_containing_symbol(symbol);
    ASSIGN_OR_RETURN(grpc::reflection::v1alpha::ServerReflectionResponse resp, Ask(req));
    if (resp.has_error_response()) {
      return absl::NotFoundError(absl::StrCat("server does not know ", symbol, ": ",
                                              resp.error_response().error_message()));
    }
    std::vector<pb::FileDescriptorProto> files;
    for (const std::string& raw : resp.file_descriptor_response().file_descriptor_proto()) {
      pb::FileDescriptorProto f;
      if (!f.ParseFromString(raw)) return absl::DataLossError("bad descriptor from server");
      files.push_back(std::move(f));
    }
    // Dependencies first: add files whose dependencies are all present, until none is left.
    std::set<std::string> added;
    for (size_t round = 0; round <= files.size(); ++round) {
      for (const pb::FileDescriptorProto& f : files) {
        if (added.contains(f.name()) || pool_.FindFileByName(f.name()) != nullptr) {
          added.insert(f.name());
          continue;
        }
        bool ready = true;
        for (const std::string& d : f.dependency()) {
          ready = ready && pool_.FindFileByName(d) != nullptr;
        }
        if (ready && pool_.BuildFile(f) != nullptr) added.insert(f.name());
      }
    }
    return &pool_;
  }

 private:
  absl::StatusOr<grpc::reflection::v1alpha::ServerReflectionResponse> Ask(
      const grpc::reflection::v1alpha::ServerReflectionRequest& req) {
    auto ctx = NewClientContext(timeout_);
    auto stream = stub_->ServerReflectionInfo(ctx.get());
    grpc::reflection::v1alpha::ServerReflectionResponse resp;
    if (!stream->Write(req) || !stream->WritesDone() || !stream->Read(&resp)) {
      grpc::Status s = stream->Finish();
      return absl::UnavailableError(absl::StrCat("reflection: ", s.error_message()));
    }
    grpc::Status s = stream->Finish();
    (void)s;
    return resp;
  }

  std::unique_ptr<grpc::reflection::v1alpha::ServerReflection::Stub> stub_;
  absl::Duration timeout_;
  pb::DescriptorPool pool_;
};

// Prints `names` one a line, or with `json` as a JSON array of strings.
void PrintNames(const std::vector<std::string>& names, bool json, std::ostream& out) {
  if (!json) {
    for (const std::string& n : names) out << n << "\n";
    return;
  }
  pb::ListValue list;
  for (const std::string& n : names) list.add_values()->set_string_value(n);
  out << ToJson(list) << "\n";
}

// Prints `descriptor`'s definition: as .proto text, or with `json` its descriptor proto
// (ServiceDescriptorProto, MethodDescriptorProto, ...) in the protobuf JSON mapping.
template <typename Descriptor, typename DescriptorProto>
void PrintDefinition(const Descriptor& descriptor, bool json, std::ostream& out) {
  if (!json) {
    out << descriptor.DebugString();
    return;
  }
  DescriptorProto proto;
  descriptor.CopyTo(&proto);
  out << ToJson(proto) << "\n";
}

int RunList(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl list", "Lists the services a daemon serves (server reflection).");
  CommonFlags common;
  int code;
  std::vector<std::string> rest =
      ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/1);
  if (code >= 0) return code;
  ReflectionClient client(NewLocalChannel(common.addr), common.timeout);
  if (!rest.empty()) {
    absl::StatusOr<const pb::DescriptorPool*> pool = client.LoadSymbol(rest[0]);
    if (!pool.ok()) {
      err << "cairnctl: " << pool.status().message() << "\n";
      return 1;
    }
    const pb::ServiceDescriptor* service = (*pool)->FindServiceByName(rest[0]);
    if (service == nullptr) {
      err << "cairnctl: no service " << rest[0] << "\n";
      return 1;
    }
    std::vector<std::string> methods;
    for (int i = 0; i < service->method_count(); ++i) {
      methods.push_back(absl::StrCat(service->full_name(), ".", service->method(i)->name()));
    }
    PrintNames(methods, common.json, out);
    return 0;
  }
  absl::StatusOr<std::vector<std::string>> names = client.ListServices();
  if (!names.ok()) {
    err << "cairnctl: " << names.status().message() << "\n";
    return 1;
  }
  PrintNames(*names, common.json, out);
  return 0;
}

int RunDescribe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl describe SYMBOL",
                "Prints the definition of a service, method or message (server reflection).");
  CommonFlags common;
  int code;
  std::vector<std::string> rest = ParseFlags(flags, common, args, out, err, &code);
  if (code >= 0) return code;
  if (rest.size() != 1) {
    err << "cairnctl describe: one SYMBOL expected\n";
    return 2;
  }
  ReflectionClient client(NewLocalChannel(common.addr), common.timeout);
  std::string symbol = rest[0];
  std::string owner = symbol;
  if (size_t slash = owner.find('/'); slash != std::string::npos) owner = owner.substr(0, slash);
  absl::StatusOr<const pb::DescriptorPool*> pool = client.LoadSymbol(owner);
  if (!pool.ok()) {
    // A method name "pkg.Service.Method": ask for its service.
    size_t dot = owner.rfind('.');
    if (dot != std::string::npos) pool = client.LoadSymbol(owner.substr(0, dot));
  }
  if (!pool.ok()) {
    err << "cairnctl: " << pool.status().message() << "\n";
    return 1;
  }
  std::replace(symbol.begin(), symbol.end(), '/', '.');
  if (const auto* s = (*pool)->FindServiceByName(symbol)) {
    PrintDefinition<pb::ServiceDescriptor, pb::ServiceDescriptorProto>(*s, common.json, out);
  } else if (const auto* m = (*pool)->FindMethodByName(symbol)) {
    PrintDefinition<pb::MethodDescriptor, pb::MethodDescriptorProto>(*m, common.json, out);
  } else if (const auto* d = (*pool)->FindMessageTypeByName(symbol)) {
    PrintDefinition<pb::Descriptor, pb::DescriptorProto>(*d, common.json, out);
  } else if (const auto* e = (*pool)->FindEnumTypeByName(symbol)) {
    PrintDefinition<pb::EnumDescriptor, pb::EnumDescriptorProto>(*e, common.json, out);
  } else {
    err << "cairnctl: no symbol " << symbol << "\n";
    return 1;
  }
  return 0;
}

bool ByteBufferToString(const grpc::ByteBuffer& buffer, std::string* out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  out->clear();
  for (const grpc::Slice& s : slices) {
    out->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return true;
}

// A server-streaming call through the generic stub: one request, then every answer printed as
// one JSON object per line (as grpcurl does). Thread roles: reactions run on gRPC's threads;
// the calling thread waits for OnDone.
class StreamingReader final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamingReader(pb::Message* prototype, std::ostream& out) : message_(prototype), out_(out) {}

  void Run(grpc::GenericStub& stub, grpc::ClientContext* ctx, const std::string& path,
           const std::string& wire) {
    grpc::Slice slice(wire);
    request_ = grpc::ByteBuffer(&slice, 1);
    stub.PrepareBidiStreamingCall(ctx, path, grpc::StubOptions(), this);
    StartWrite(&request_);
    StartWritesDone();
    StartRead(&response_);
    StartCall();
    done_.WaitForNotification();
  }
  void OnWriteDone(bool /*ok*/) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::string bytes;
    if (ByteBufferToString(response_, &bytes) && message_->ParseFromString(bytes)) {
      std::string line;
      pb::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      if (pb::util::MessageToJsonString(*message_, &line, o).ok()) out_ << line << "\n";
      out_.flush();
    } else {
      malformed_ = true;
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& s) override {
    status_ = s;
    done_.Notify();
  }
  const grpc::Status& status() const { return status_; }
  bool malformed() const { return malformed_; }

 private:
  pb::Message* message_;
  std::ostream& out_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  grpc::Status status_;
  bool malformed_ = false;
  Notification done_;
};

int StreamingCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& path,
                  const std::string& wire, absl::Duration timeout, pb::Message& prototype,
                  std::ostream& out, std::ostream& err) {
  grpc::GenericStub stub(channel);
  auto ctx = NewClientContext(timeout);
  StreamingReader reader(&prototype, out);
  reader.Run(stub, ctx.get(), path, wire);
  if (!reader.status().ok()) return Fail(err, reader.status());
  if (reader.malformed()) {
    err << "cairnctl: an answer did not parse as " << prototype.GetTypeName() << "\n";
    return 1;
  }
  return 0;
}

int RunCall(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl call SERVICE/METHOD [JSON | @FILE | @]",
                "Calls a unary or server-streaming method with a JSON request and prints the JSON "
                "answer (one object per line for a stream). The method may be written "
                "SERVICE.METHOD too; the request is {} when left out, read from FILE with @FILE "
                "and from standard input with @ (as grpcurl's -d @).");
  CommonFlags common;
  int code;
  std::vector<std::string> rest = ParseFlags(flags, common, args, out, err, &code);
  if (code >= 0) return code;
  // grpcurl accepts "pkg.Service/Method" and "pkg.Service.Method".
  const size_t split = rest.empty()                             ? std::string::npos
                       : rest[0].find('/') != std::string::npos ? rest[0].find('/')
                                                                : rest[0].rfind('.');
  if (rest.empty() || rest.size() > 2 || split == std::string::npos || split == 0 ||
      split + 1 == rest[0].size()) {
    err << "cairnctl call: SERVICE/METHOD [JSON | @FILE | @] expected\n";
    return 2;
  }
  // Read before any call: a bad @FILE is a bad argument, whether or not the daemon is up.
  std::string json = rest.size() == 2 ? rest[1] : "{}";
  if (absl::StartsWith(json, "@")) {
    // A request too large for the command line (ARG_MAX), or kept in a file.
    const std::string file = json.substr(1);
    std::stringstream text;
    if (file.empty() || file == "-") {
      text << std::cin.rdbuf();
      json = text.str();
    } else {
      absl::StatusOr<std::string> contents = ReadUserFile(file, "cairnctl call");
      if (!contents.ok()) {
        err << contents.status().message() << "\n";
        return 2;
      }
      json = *std::move(contents);
    }
  }
  const std::string service_name = rest[0].substr(0, split);
  const std::string method_name = rest[0].substr(split + 1);
  std::shared_ptr<grpc::Channel> channel = NewLocalChannel(common.addr);
  ReflectionClient client(channel, common.timeout);
  absl::StatusOr<const pb::DescriptorPool*> pool = client.LoadSymbol(service_name);
  if (!pool.ok()) {
    err << "cairnctl: " << pool.status().message() << "\n";
    return 1;
  }
  const pb::ServiceDescriptor* service = (*pool)->FindServiceByName(service_name);
  const pb::MethodDescriptor* method =
      service == nullptr ? nullptr : service->FindMethodByName(method_name);
  if (method == nullptr) {
    err << "cairnctl: no method " << rest[0] << "\n";
    return 1;
  }
  if (method->client_streaming()) {
    err << "cairnctl call: " << rest[0] << " takes a stream of requests; use its friendly verb\n";
    return 2;
  }
  pb::DynamicMessageFactory factory(*pool);
  std::unique_ptr<pb::Message> request(factory.GetPrototype(method->input_type())->New());
  std::unique_ptr<pb::Message> response(factory.GetPrototype(method->output_type())->New());
  if (auto s = pb::util::JsonStringToMessage(json, request.get()); !s.ok()) {
    err << "cairnctl: bad JSON for " << method->input_type()->full_name() << ": " << s.message()
        << "\n";
    return 2;
  }
  std::string wire;
  request->SerializeToString(&wire);
  const std::string path = absl::StrCat("/", service_name, "/", method_name);
  if (method->server_streaming()) {
    return StreamingCall(channel, path, wire, common.timeout, *response, out, err);
  }
  grpc::Slice slice(wire);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  grpc::GenericStub stub(channel);
  auto ctx = NewClientContext(common.timeout);
  Notification done;
  grpc::Status status;
  stub.UnaryCall(ctx.get(), path, grpc::StubOptions(), &request_buffer, &response_buffer,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return Fail(err, status);
  std::string answer;
  if (!ByteBufferToString(response_buffer, &answer) || !response->ParseFromString(answer)) {
    err << "cairnctl: answer does not parse as " << method->output_type()->full_name() << "\n";
    return 1;
  }
  out << ToJson(*response) << "\n";
  return 0;
}

// ---------------------------------------------------------------------------------------
// Friendly verbs over the cache daemon.

std::unique_ptr<cv1::CacheService::Stub> CacheStub(const CommonFlags& common) {
  return cv1::CacheService::NewStub(NewLocalChannel(common.addr));
}

int RunStatus(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl status", "Shows the cache daemon's budgets, tiers and hit counts.");
  CommonFlags common;
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  cv1::GetStatusResponse r;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = CacheStub(common)->GetStatus(ctx.get(), cv1::GetStatusRequest(), &r);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(r) << "\n";
    return 0;
  }
  out << "incarnation   " << absl::StrFormat("%016x", r.cache_incarnation()) << "\n"
      << "uptime        " << r.uptime_ms() / 1000 << " s\n"
      << "sessions      " << r.sessions() << "\n"
      << "ram           " << Bytes(r.ram().used_bytes()) << " of "
      << Bytes(r.ram().capacity_bytes()) << " (" << r.ram().checkpoints() << " checkpoints, max "
      << r.ram().max_checkpoints() << ")\n"
      << "  rows        " << Bytes(r.ram().row_bytes()) << " stored once\n"
      << "  private     " << Bytes(r.ram().private_bytes()) << "\n"
      << "  full copies " << Bytes(r.ram().full_copy_bytes())
      << " would be needed without sharing\n";
  if (r.disk_enabled()) {
    out << "disk          " << Bytes(r.disk().used_bytes()) << " of "
        << Bytes(r.disk().capacity_bytes()) << " (" << r.disk().checkpoints() << " checkpoints, "
        << (r.disk_healthy() ? "healthy" : "READ-ONLY") << ", " << r.quarantined()
        << " quarantined)\n"
        << "  free        " << Bytes(r.disk_free_bytes()) << " usable on the file system\n";
  } else {
    out << "disk          off\n";
  }
  out << "lookups       " << r.lookups() << " (hits: live " << r.hits_live() << ", ram "
      << r.hits_ram() << ", disk " << r.hits_disk() << "; " << r.tokens_restored()
      << " tokens restored)\n";
  return 0;
}

int RunCheckpoints(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl checkpoints", "Lists the cache daemon's checkpoints.");
  CommonFlags common;
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  cv1::ListCheckpointsResponse r;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = CacheStub(common)->ListCheckpoints(ctx.get(), cv1::ListCheckpointsRequest(), &r);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(r) << "\n";
    return 0;
  }
  out << absl::StrFormat("%8s %9s %5s %5s %9s %12s %12s  %s\n", "ID", "DEPTH", "TIER", "DISK",
                         "BORROWED", "PRIVATE", "ROWS", "CONVERSATION");
  for (const auto& c : r.checkpoints()) {
    out << absl::StrFormat("%8d %9d %5s %5s %9s %12s %12s  %s\n", c.checkpoint_id(), c.depth(),
                           TierName(c.tier()), c.on_disk() ? "yes" : "no",
                           c.borrowed() ? "yes" : "no", Bytes(c.private_bytes()),
                           Bytes(c.row_bytes()), c.conversation());
  }
  return 0;
}

int RunTree(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl tree", "Prints the prefix tree of the first registered model.");
  CommonFlags common;
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  cv1::GetTreeResponse r;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = CacheStub(common)->GetTree(ctx.get(), cv1::GetTreeRequest(), &r);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(r) << "\n";
    return 0;
  }
  std::map<uint64_t, std::vector<const cv1::TreeNode*>> children;
  for (const auto& n : r.nodes()) children[n.parent_id()].push_back(&n);
  std::function<void(uint64_t, int)> print = [&](uint64_t parent, int indent) {
    for (const cv1::TreeNode* n : children[parent]) {
      out << std::string(2 * indent, ' ') << "@" << n->depth() << " (+" << n->edge_tokens() << ")";
      for (const auto& c : n->candidates()) {
        out << "  " << TierName(c.tier()) << " #" << c.checkpoint_id();
      }
      out << "\n";
      print(n->node_id(), indent + 1);
    }
  };
  out << "root\n";
  print(0, 1);
  if (r.truncated()) out << "(truncated)\n";
  return 0;
}

// How long `events --follow` follows without --timeout.
constexpr absl::Duration kFollowTimeout = absl::Hours(24);

int RunEvents(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl events", "Prints the cache's decision events.");
  CommonFlags common;
  bool follow = false;
  int64_t after = 0;
  int limit = 0;
  flags.Add("follow", &follow,
            "keep printing new events until --timeout (here 24h unless given) passes, then exit 0");
  flags.Add("after", &after, "only events after this sequence number");
  flags.Add("limit", &limit, "stop after this many events (0: no limit)");
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  if (after < 0 || limit < 0) {
    err << "cairnctl events: --after and --limit must be non-negative\n";
    return 2;
  }
  cv1::StreamEventsRequest req;
  req.set_after_seq(static_cast<uint64_t>(after));
  req.set_follow(follow);
  req.set_limit(static_cast<uint32_t>(limit));
  // Following has no natural end: unless --timeout says otherwise, a long deadline, renewed by
  // running the verb again.
  auto ctx = NewClientContext(follow && !flags.WasSet("timeout") ? kFollowTimeout : common.timeout);
  auto reader = CacheStub(common)->StreamEvents(ctx.get(), req);
  cv1::Event e;
  while (reader->Read(&e)) {
    if (common.json) {
      std::string line;
      pb::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      (void)pb::util::MessageToJsonString(e, &line, o);
      out << line << "\n";
    } else {
      out << e.detail() << (e.reason().empty() ? "" : "  (" + e.reason() + ")") << "\n";
    }
    out.flush();
  }
  grpc::Status s = reader->Finish();
  // Following ends at its deadline: that is the end the user asked for, not a failure.
  if (follow && s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return 0;
  if (!s.ok()) return Fail(err, s);
  return 0;
}

int RunEvict(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl evict (ID | --all) [--disk]", "Evicts checkpoints from RAM (and disk).");
  CommonFlags common;
  bool all = false;
  bool disk = false;
  flags.Add("all", &all, "evict every unpinned checkpoint");
  flags.Add("disk", &disk, "also delete the disk copies");
  int code;
  std::vector<std::string> rest =
      ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/1);
  if (code >= 0) return code;
  cv1::EvictRequest req;
  req.set_all(all);
  req.set_include_disk(disk);
  if (all && !rest.empty()) {
    err << "cairnctl evict: give a checkpoint id or --all, not both (unexpected '" << rest[0]
        << "')\n";
    return 2;
  }
  if (!all) {
    uint64_t id = 0;
    if (rest.size() != 1 || !absl::SimpleAtoi(rest[0], &id) || id == 0) {
      err << "cairnctl evict: a checkpoint id or --all expected\n";
      return 2;
    }
    req.set_checkpoint_id(id);
  }
  cv1::EvictResponse r;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = CacheStub(common)->Evict(ctx.get(), req, &r);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(r) << "\n";
    return 0;
  }
  out << "evicted " << r.evicted_size() << " checkpoint(s)\n";
  return 0;
}

int RunExplain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl explain",
                "Says what the cache would restore for a prompt (token ids as arguments, or "
                "--tokens-file), why it would miss, and the events about checkpoints on its path.");
  CommonFlags common;
  int64_t model = 0;
  std::string tokens_file;
  flags.Add("model", &model, "model id (0: the first registered)");
  flags.Add("tokens-file", &tokens_file, "file of token ids separated by spaces or commas");
  int code;
  std::vector<std::string> rest = ParseFlags(flags, common, args, out, err, &code);
  if (code >= 0) return code;
  std::vector<std::string> words = rest;
  if (!tokens_file.empty()) {
    absl::StatusOr<std::string> text = ReadUserFile(tokens_file, "cairnctl explain: --tokens-file");
    if (!text.ok()) {
      err << text.status().message() << "\n";
      return 2;
    }
    words.push_back(*std::move(text));
  }
  cv1::ExplainRequest req;
  if (model < 0) {
    err << "cairnctl explain: --model must not be negative\n";
    return 2;
  }
  req.set_model_id(static_cast<uint64_t>(model));
  for (const std::string& w : words) {
    for (absl::string_view t : absl::StrSplit(w, absl::ByAnyChar(", \n\t"), absl::SkipEmpty())) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(t, &id)) {
        err << "cairnctl explain: \"" << t << "\" is not a token id\n";
        return 2;
      }
      req.add_tokens(id);
    }
  }
  if (req.tokens_size() == 0) {
    err << "cairnctl explain: token ids expected (arguments or --tokens-file)\n";
    return 2;
  }
  cv1::ExplainResponse r;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = CacheStub(common)->Explain(ctx.get(), req, &r);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(r) << "\n";
    return 0;
  }
  out << r.summary() << "\n";
  const cv1::Candidate& best = r.lookup().best();
  if (best.tier() != cv1::TIER_UNSPECIFIED) {
    out << "best          " << TierName(best.tier()) << " #" << best.checkpoint_id() << " at "
        << best.depth() << " tokens\n";
  }
  out << "shared prefix " << r.lookup().shared_prefix() << " tokens\n";
  if (r.lookup().plan().captures_size() > 0) {
    out << "would capture";
    for (const auto& c : r.lookup().plan().captures()) out << " " << c.position();
    out << "\n";
  }
  for (const cv1::Event& e : r.related()) {
    out << "  #" << e.seq() << " " << e.detail() << "\n";
  }
  return 0;
}

int RunFlush(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl flush", "Waits until every queued disk write is published.");
  CommonFlags common;
  common.timeout = absl::Minutes(5);
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  cv1::FlushResponse r;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = CacheStub(common)->Flush(ctx.get(), cv1::FlushRequest(), &r);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(r) << "\n";
    return 0;
  }
  out << "published " << r.persisted() << " checkpoint(s)\n";
  return 0;
}

}  // namespace

const std::vector<Command>& OnlineCommands() {
  static const auto* commands = new std::vector<Command>{
      {"list", "list services (or a service's methods) through reflection", &RunList},
      {"describe", "describe a service, method or message through reflection", &RunDescribe},
      {"call", "call SERVICE/METHOD with a JSON request", &RunCall},
      {"status", "cache daemon budgets, tiers and hits", &RunStatus},
      {"checkpoints", "list the cache daemon's checkpoints", &RunCheckpoints},
      {"tree", "print the cache's prefix tree", &RunTree},
      {"events", "print (or --follow) the cache's decision events", &RunEvents},
      {"evict", "evict a checkpoint (or --all) from RAM", &RunEvict},
      {"flush", "wait for queued disk writes", &RunFlush},
      {"explain", "why a prompt would miss, or what it would restore", &RunExplain},
  };
  return *commands;
}

}  // namespace cairn::cairnctl
