// The Jinja template parser and renderer, through the chat template: the template source and
// the request JSON (messages, tools, flags) it renders, then RenderPrompt with a small
// byte-level tokenizer whose special tokens the template and the messages may both write (the
// markers that keep a message's special tokens text, the stable and shared boundaries).
// Input: the template source, "\0\0", then the request JSON object.

#include <memory>
#include <string>

#include "nlohmann/json.hpp"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/tokenizer.h"
#include "services/infer/text/unicode.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// Every byte a token (GPT-2's byte-to-character map), no merges, and three special tokens.
const cairn::infer::text::Tokenizer* SmallTokenizer() {
  static const cairn::infer::text::Tokenizer* tokenizer = [] {
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      std::string key;
      cairn::infer::text::unicode::AppendUtf8(printable ? b : 256 + shifted++, &key);
      vocab[key] = b;
    }
    const nlohmann::ordered_json j = {
        {"added_tokens",
         {{{"id", 300}, {"content", "<s>"}, {"special", true}},
          {{"id", 301}, {"content", "</s>"}, {"special", true}},
          {{"id", 302}, {"content", "<|im_end|>"}, {"special", true}}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}}},
    };
    absl::StatusOr<std::unique_ptr<cairn::infer::text::Tokenizer>> t =
        cairn::infer::text::Tokenizer::FromJson(j.dump());
    return t.ok() ? t->release() : nullptr;
  }();
  return tokenizer;
}

}  // namespace

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
  if (const cairn::infer::text::Tokenizer* tokenizer = SmallTokenizer(); tokenizer != nullptr) {
    cairn::infer::text::RenderPrompt(**tmpl, *tokenizer, *request).IgnoreError();
  }
  return 0;
}
