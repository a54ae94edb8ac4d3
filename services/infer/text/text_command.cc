#include "services/infer/text/text_command.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/bounded_json.h"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/file_util.h"
#include "services/infer/text/tokenizer.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text {
namespace {

using ordered_json = nlohmann::ordered_json;

// Returns the bytes whose lower- or upper-case hex is `hex`, or InvalidArgument.
absl::StatusOr<std::string> BytesOfHex(const std::string& hex) {
  if (hex.size() % 2 != 0 ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
    return absl::InvalidArgumentError("encode_hex is not an even number of hex digits");
  }
  return absl::HexStringToBytes(hex);
}

// Answers one decode case: Decode, and the StreamingDecoder fed the ids one at a time.
ordered_json DecodeCase(const Tokenizer& tokenizer, const std::vector<TokenId>& ids,
                        bool skip_special) {
  ordered_json answer;
  absl::StatusOr<std::string> text = tokenizer.Decode(ids, skip_special);
  if (!text.ok()) {
    answer["error"] = std::string(text.status().message());
    return answer;
  }
  StreamingDecoder stream(&tokenizer, skip_special);
  std::string joined;
  bool pieces_valid = true;
  for (TokenId id : ids) {
    absl::StatusOr<std::string> piece = stream.Push(id);
    if (!piece.ok()) {
      answer["error"] = absl::StrCat("stream: ", piece.status().message());
      return answer;
    }
    pieces_valid = pieces_valid && unicode::IsValidUtf8(*piece);
    joined += *piece;
  }
  joined += stream.Flush();
  answer["text"] = *text;
  answer["stream"] = joined;
  answer["stream_pieces_valid"] = pieces_valid;
  return answer;
}

// A JSON integer that a TokenId holds (any other is a malformed case, never truncated).
bool IsTokenId(const ordered_json& id) {
  if (id.is_number_unsigned()) {
    return id.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<TokenId>::max());
  }
  return id.is_number_integer() && id.get<int64_t>() >= std::numeric_limits<TokenId>::min() &&
         id.get<int64_t>() <= std::numeric_limits<TokenId>::max();
}

// Runs the --tokenize-batch cases of `batch` (JSON Lines), one answer line each.
absl::Status RunBatch(const Tokenizer& tokenizer, const std::string& batch, std::ostream& out) {
  std::istringstream in(batch);
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.empty()) continue;
    const ordered_json c = ordered_json::parse(line, nullptr, false);
    ordered_json answer;
    if (c.is_object() && c.contains("encode_hex") && c["encode_hex"].is_string()) {
      absl::StatusOr<std::string> text = BytesOfHex(c["encode_hex"].get<std::string>());
      absl::StatusOr<std::vector<TokenId>> ids =
          text.ok() ? tokenizer.Encode(*text) : text.status();
      if (ids.ok()) {
        answer["ids"] = *ids;
      } else {
        answer["error"] = std::string(ids.status().message());
      }
    } else if (c.is_object() && c.contains("decode") && c["decode"].is_array() &&
               std::all_of(c["decode"].begin(), c["decode"].end(), IsTokenId) &&
               (!c.contains("skip_special") || c["skip_special"].is_boolean())) {
      std::vector<TokenId> ids;
      for (const ordered_json& id : c["decode"]) ids.push_back(id.get<TokenId>());
      answer =
          DecodeCase(tokenizer, ids, c.contains("skip_special") && c["skip_special"].get<bool>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, " is neither an encode_hex nor a decode case"));
    }
    out << answer.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTextCommand(const TextCommandOptions& options, std::ostream& out) {
  if (options.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  const int modes = !options.tokenize_file.empty() + !options.tokenize_batch_file.empty() +
                    !options.render_file.empty();
  if (modes != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --tokenize-file, --tokenize-batch and --render");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                   Tokenizer::FromFile(options.model_dir + "/tokenizer.json"));
  if (!options.tokenize_batch_file.empty()) {
    ASSIGN_OR_RETURN(std::string batch, ReadFileToString(options.tokenize_batch_file));
    return RunBatch(*tokenizer, batch, out);
  }
  nlohmann::ordered_json result;
  if (!options.tokenize_file.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(options.tokenize_file));
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer->Encode(text);
    if (!ids.ok()) {
      return absl::Status(ids.status().code(),
                          absl::StrCat(options.tokenize_file, ": ", ids.status().message()));
    }
    result["ids"] = *ids;
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<ChatTemplate> tmpl,
                     ChatTemplate::FromModelDir(options.model_dir));
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(options.render_file));
    if (absl::Status bounds = CheckJsonTextBounds(text); !bounds.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(options.render_file, ": ", bounds.message()));
    }
    const nlohmann::ordered_json request = nlohmann::ordered_json::parse(text, nullptr, false);
    if (request.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(options.render_file, " is not valid JSON"));
    }
    ASSIGN_OR_RETURN(ChatRequest chat, ParseChatRequest(request));
    ASSIGN_OR_RETURN(RenderedPrompt prompt, RenderPrompt(*tmpl, *tokenizer, chat));
    result["text"] = prompt.text;
    result["ids"] = prompt.ids;
    result["stable_boundary"] = prompt.stable_boundary;
  }
  out << result.dump(options.json ? -1 : 2, ' ', false,
                     nlohmann::ordered_json::error_handler_t::replace)
      << "\n";
  return absl::OkStatus();
}

}  // namespace cairn::infer::text
