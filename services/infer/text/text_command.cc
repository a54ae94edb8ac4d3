#include "services/infer/text/text_command.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/file_util.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer::text {

absl::Status RunTextCommand(const TextCommandOptions& options, std::ostream& out) {
  if (options.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  if (options.tokenize_file.empty() == options.render_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --tokenize-file and --render");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                   Tokenizer::FromFile(options.model_dir + "/tokenizer.json"));
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
