// cairnctl's verbs over the inference daemon: `slots`, `model` and `generate`.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/grpc/client.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "tools/cairnctl/command.h"
#include "tools/cairnctl/rpc_util.h"
#include "tools/cairnctl/verb_flags.h"

namespace cairn::cairnctl {
namespace {

namespace iv1 = ::cairn::infer::v1;

// The inference daemon's default address: $CAIRN_INFER_ADDR, else infer.sock in the runtime
// directory.
std::string DefaultInferAddress() {
  if (const char* d = std::getenv("CAIRN_INFER_ADDR"); d != nullptr && *d != '\0') return d;
  if (const char* d = std::getenv("CAIRN_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat("unix:", d, "/infer.sock");
  }
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat("unix:", d, "/cairn/infer.sock");
  }
  return absl::StrCat("unix:/tmp/cairn-", ::getuid(), "/infer.sock");
}

std::unique_ptr<iv1::InferService::Stub> InferStub(const CommonFlags& common) {
  return iv1::InferService::NewStub(NewLocalChannel(common.addr));
}

const char* SlotStateName(iv1::SlotInfo::State s) {
  switch (s) {
    case iv1::SlotInfo::STATE_IDLE:
      return "idle";
    case iv1::SlotInfo::STATE_PREFILL:
      return "prefill";
    case iv1::SlotInfo::STATE_DECODE:
      return "decode";
    case iv1::SlotInfo::STATE_RESTORING:
      return "restoring";
    default:
      return "?";
  }
}

const char* TierName(iv1::CacheResult::Tier t) {
  switch (t) {
    case iv1::CacheResult::TIER_LIVE:
      return "live";
    case iv1::CacheResult::TIER_RAM:
      return "ram";
    case iv1::CacheResult::TIER_DISK:
      return "disk";
    default:
      return "cold";
  }
}

int RunSlots(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl slots", "Lists the inference daemon's execution slots.");
  CommonFlags common;
  common.addr = DefaultInferAddress();
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  iv1::ListSlotsResponse resp;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = InferStub(common)->ListSlots(ctx.get(), {}, &resp);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(resp) << "\n";
    return 0;
  }
  out << absl::StrFormat("%-5s %-10s %10s  %-20s %s\n", "SLOT", "STATE", "TOKENS", "REQUEST",
                         "CONVERSATION");
  for (const iv1::SlotInfo& slot : resp.slots()) {
    out << absl::StrFormat("%-5d %-10s %10d  %-20s %s\n", slot.slot(), SlotStateName(slot.state()),
                           slot.tokens(), slot.request_id(), slot.conversation());
  }
  out << resp.queued_requests() << " requests queued\n";
  return 0;
}

int RunModel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl model", "Describes the model the inference daemon serves.");
  CommonFlags common;
  common.addr = DefaultInferAddress();
  int code;
  ParseFlags(flags, common, args, out, err, &code, /*max_positionals=*/0);
  if (code >= 0) return code;
  iv1::GetModelInfoResponse m;
  auto ctx = NewClientContext(common.timeout);
  grpc::Status s = InferStub(common)->GetModelInfo(ctx.get(), {}, &m);
  if (!s.ok()) return Fail(err, s);
  if (common.json) {
    out << ToJson(m) << "\n";
    return 0;
  }
  out << "model         " << m.name() << " (" << m.architecture() << ", " << m.parameters()
      << " parameters)\n"
      << "context       " << m.context_length() << " tokens, vocabulary " << m.vocab_size() << "\n"
      << "layers        " << m.full_attention_layers() << " attention, "
      << m.linear_attention_layers() << " linear attention\n"
      << "state         " << m.bytes_per_row() << " bytes per token, " << m.private_state_bytes()
      << " bytes of private state\n"
      << "slots         " << m.slots() << " on backend " << m.backend() << "\n"
      << "identity      " << m.compat_digest() << " (weights " << m.weights_digest() << ")\n"
      << "cache         " << (m.cache_connected() ? "connected" : "not connected") << "\n";
  return 0;
}

// The text of an OpenAI message's `content`: a string, null (none), or an array of text parts
// ({"type": "text", "text": ...}, or bare strings) joined with newlines, as the gateway joins
// them. Any other part is InvalidArgument naming it: cairnctl sends no media.
absl::StatusOr<std::string> ChatContent(const nlohmann::json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".content must be a string or an array of text parts"));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const nlohmann::json& part = content[i];
    const std::string name = absl::StrCat(where, ".content[", i, "]");
    const char* separator = i == 0 ? "" : "\n";
    if (part.is_string()) {
      absl::StrAppend(&text, separator, part.get_ref<const std::string&>());
      continue;
    }
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be an object with a type"));
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type != "text" && type != "input_text" && type != "output_text") {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is a \"", type, "\" part; only text parts are supported"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".text must be a string"));
    }
    for (const auto& [key, value] : part.items()) {
      if (key != "type" && key != "text") {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ".", key, " is not supported (a text part has type and text)"));
      }
    }
    absl::StrAppend(&text, separator, part["text"].get_ref<const std::string&>());
  }
  return text;
}

}  // namespace

absl::Status ParseChat(const std::string& text, iv1::ChatPrompt* chat) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return absl::InvalidArgumentError("must be a JSON array of messages");
  if (j.empty()) return absl::InvalidArgumentError("holds no message");
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& m = j[i];
    const std::string where = absl::StrCat("[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", where, " needs a string role (every message does)"));
    }
    iv1::ChatMessage* cm = chat->add_messages();
    for (const auto& [key, value] : m.items()) {
      if (key == "role") {
        cm->set_role(value.get<std::string>());
      } else if (key == "content") {
        absl::StatusOr<std::string> content = ChatContent(value, where);
        if (!content.ok()) return content.status();
        cm->set_content(*std::move(content));
      } else if (key == "name" || key == "reasoning_content" || key == "tool_call_id") {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " must be a string"));
        }
        const std::string& v = value.get_ref<const std::string&>();
        if (key == "name") {
          cm->set_name(v);
        } else if (key == "reasoning_content") {
          cm->set_reasoning_content(v);
        } else {
          cm->set_tool_call_id(v);
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".", key,
            " is not supported by --chat (send it with 'cairnctl call' or the gateway)"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

int RunGenerate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("cairnctl generate [PROMPT]",
                "Runs one request on the inference daemon: PROMPT as text, --chat JSON "
                "(OpenAI messages) or --prompt-ids FILE; prints the text as it streams, then the "
                "cache report.");
  CommonFlags common;
  common.addr = DefaultInferAddress();
  common.timeout = absl::Minutes(10);
  std::string chat, prompt_ids, conversation;
  int max_tokens = 0;
  double temperature = 0;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool parse_output = false;
  flags.Add("chat", &chat,
            "a JSON array of messages [{\"role\": ..., \"content\": ...}]; content is a string "
            "or an array of text parts; name, reasoning_content and tool_call_id are kept");
  flags.Add("prompt-ids", &prompt_ids, "a file holding a JSON array of token ids");
  flags.Add("max-tokens", &max_tokens, "most tokens to generate (0: up to the context)", 0, kNoMax);
  flags.Add("temperature", &temperature, "0: greedy", 0, kNoMaxReal);
  flags.Add("seed", &seed, "sampling seed (-1: random)", -1, kNoMax64);
  flags.Add("stop", &stop, "stop strings (comma-separated)");
  flags.Add("conversation", &conversation, "label for the cache's events");
  flags.Add("parse-output", &parse_output, "split reasoning and tool calls out of the text");
  int code;
  std::vector<std::string> rest = ParseFlags(flags, common, args, out, err, &code);
  if (code >= 0) return code;
  iv1::GenerateRequest req;
  const int sources =
      (!rest.empty() ? 1 : 0) + (!chat.empty() ? 1 : 0) + (!prompt_ids.empty() ? 1 : 0);
  if (sources != 1 || rest.size() > 1) {
    err << "cairnctl generate: give exactly one of PROMPT, --chat or --prompt-ids\n";
    return 2;
  }
  // The request's strings travel as protobuf strings, which must be UTF-8: the daemon could not
  // parse the request otherwise.
  std::vector<std::pair<std::string, std::string>> texts = {
      {"PROMPT", rest.empty() ? "" : rest[0]}, {"--chat", chat}, {"--conversation", conversation}};
  for (const std::string& s : stop) texts.emplace_back("--stop", s);
  for (const auto& [what, text] : texts) {
    if (absl::Status s = CheckUtf8(text, what); !s.ok()) {
      err << "cairnctl generate: " << s.message() << "\n";
      return 2;
    }
  }
  if (!rest.empty()) req.set_text(rest[0]);
  if (!chat.empty()) {
    absl::Status s = ParseChat(chat, req.mutable_chat());
    if (!s.ok()) {
      err << "cairnctl generate: --chat: " << s.message() << "\n";
      return 2;
    }
  }
  if (!prompt_ids.empty()) {
    absl::StatusOr<std::string> text = ReadUserFile(prompt_ids, "--prompt-ids");
    if (!text.ok()) {
      err << "cairnctl generate: " << text.status().message() << "\n";
      return 2;
    }
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array()) {
      err << "cairnctl generate: " << prompt_ids << " is not a JSON array of token ids\n";
      return 2;
    }
    req.mutable_token_ids();
    for (const nlohmann::json& id : j) {
      // Token ids are uint32 on the wire; a larger one must not be cut to its low bits.
      if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        err << "cairnctl generate: " << prompt_ids << " holds " << id.dump()
            << ", which is not a token id (an integer in [0, 2^32))\n";
        return 2;
      }
      req.mutable_token_ids()->add_ids(static_cast<uint32_t>(id.get<uint64_t>()));
    }
  }
  iv1::SamplingParams* sp = req.mutable_sampling();
  if (max_tokens > 0) sp->set_max_tokens(static_cast<uint32_t>(max_tokens));
  sp->set_temperature(static_cast<float>(temperature));
  if (seed >= 0) sp->set_seed(static_cast<uint64_t>(seed));
  for (const std::string& s : stop) sp->add_stop(s);
  req.set_conversation(conversation);
  req.set_parse_output(parse_output);

  auto ctx = NewClientContext(common.timeout);
  auto reader = InferStub(common)->Generate(ctx.get(), req);
  iv1::GenerateResponse m;
  iv1::Finished finished;
  while (reader->Read(&m)) {
    if (common.json) {
      std::string line;
      google::protobuf::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(m, &line, o);
      out << line << "\n";
    } else if (m.has_delta()) {
      out << m.delta().reasoning_text() << m.delta().text();
      out.flush();
    }
    if (m.has_finished()) finished = m.finished();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail(err, s);
  if (!common.json) {
    const iv1::CacheResult& c = finished.cache();
    out << "\n\n"
        << absl::StrFormat(
               "%d prompt tokens (%d cached, restored from %s at %d, %d prefilled), %d generated"
               " (%.1f tokens/s); ttft %.1f ms, restore %.1f ms, capture %.1f ms, %d captures%s\n",
               finished.prompt_tokens(), finished.cached_tokens(), TierName(c.restored_from()),
               c.restored_depth(), c.prefilled_tokens(), finished.completion_tokens(),
               finished.decode_tokens_per_s(), c.ttft_ms(), c.restore_ms(), c.capture_ms(),
               c.captures(), c.cache_available() ? "" : "; cache unavailable");
    if (!c.miss_reason().empty()) out << "miss: " << c.miss_reason() << "\n";
  }
  return 0;
}

}  // namespace

const std::vector<Command>& InferCommands() {
  static const auto* commands = new std::vector<Command>{
      {"slots", "list the inference daemon's execution slots", &RunSlots},
      {"model", "describe the model the inference daemon serves", &RunModel},
      {"generate", "run one request on the inference daemon and print its stream", &RunGenerate},
  };
  return *commands;
}

}  // namespace cairn::cairnctl
