// The Jinja template parser and renderer, through the chat template: the template source and
// the request JSON (messages, tools, flags) it renders.
// Input: the template source, "\0\0", then the request JSON object.

#include <memory>

#include "nlohmann/json.hpp"
#include "services/infer/text/chat_template.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

CAIRN_FUZZ_TARGET(ChatTemplate) {
  cairn::fuzz::FuzzInput in(data, size);
  const absl::string_view source = in.Until(absl::string_view("\0\0", 2));
  const absl::string_view request_json = in.rest();
  cairn::infer::text::ChatTemplateOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  // Small limits keep each run fast; the limits themselves are under test too.
  options.jinja.max_output_bytes = 1 << 16;
  options.jinja.max_loop_iterations = 1 << 12;
  options.jinja.max_call_depth = 16;
  absl::StatusOr<std::unique_ptr<cairn::infer::text::ChatTemplate>> tmpl =
      cairn::infer::text::ChatTemplate::Create(cairn::fuzz::Std(source), options);
  if (!tmpl.ok()) return 0;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(cairn::fuzz::Std(request_json), nullptr,
                                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) j = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (!j.is_object()) return 0;
  absl::StatusOr<cairn::infer::text::ChatRequest> request = cairn::infer::text::ParseChatRequest(j);
  if (!request.ok()) return 0;
  (*tmpl)->Render(*request).IgnoreError();  // Errors are fine; crashes and hangs are not.
  return 0;
}
