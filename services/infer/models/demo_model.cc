#include "services/infer/models/demo_model.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/json/json_scan.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace cairn::infer {
namespace {

// The template is Jinja2 as transformers renders it (trim_blocks and lstrip_blocks on).
constexpr std::string_view kDemoChatTemplate = R"jinja(
{#- Cairn demo model chat template (written for Cairn; ChatML turns in the style of Qwen3).
    Earlier reasoning is dropped from assistant turns, so that a conversation's prompts grow
    by appending: everything before the generation prompt is repeated by the next request. -#}
{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part is mapping and part.get('type') == 'text' -%}
                {{- part.get('text', '') -}}
            {%- elif part is string -%}
                {{- part -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set has_tools = tools is defined and tools is not none and tools | length > 0 %}
{%- set opens_with_system = messages | length > 0 and messages[0].role == 'system' %}
{%- if has_tools %}
    {{- '<|im_start|>system\n' }}
    {%- if opens_with_system %}
        {{- render_content(messages[0].content) | trim ~ '\n\n' }}
    {%- endif %}
    {{- '# Available functions\n\nEach function you may use is described by one JSON schema per line between <tools> and </tools>:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' ~ (tool | tojson) }}
    {%- endfor %}
    {{- '\n</tools>\n\nTo use functions, reply with one <tool_call></tool_call> block per call, each holding a JSON object with the function name and its arguments:\n<tool_call>\n{"name": "function name", "arguments": {"argument": "value"}}\n</tool_call><|im_end|>\n' }}
{%- elif opens_with_system %}
    {{- '<|im_start|>system\n' ~ render_content(messages[0].content) | trim ~ '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- set text = render_content(message.content) %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}
            {{- '<|im_start|>system\n' ~ text | trim ~ '<|im_end|>\n' }}
        {%- endif %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\n' ~ text ~ '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- if '</think>' in text %}
            {%- set text = text.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' ~ text }}
        {%- if message.tool_calls is defined and message.tool_calls %}
            {%- for entry in message.tool_calls %}
                {%- set call = entry.function if entry.function is defined else entry %}
                {%- if loop.first %}
                    {{- '\n' if text else '' }}
                {%- else %}
                    {{- '\n' }}
                {%- endif %}
                {{- '<tool_call>\n{"name": ' ~ (call.name | tojson) ~ ', "arguments": ' }}
                {%- if call.arguments is string %}
                    {{- call.arguments }}
                {%- else %}
                    {{- call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or loop.previtem.role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' ~ text ~ '\n</tool_response>' }}
        {%- if loop.last or loop.nextitem.role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('unexpected message role ' ~ message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
)jinja";

absl::Status CopyFile(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return absl::InternalError(absl::StrCat("copying ", from.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status WriteFile(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace

std::string_view DemoChatTemplate() {
  // Without the raw string's leading newline.
  return kDemoChatTemplate.substr(1);
}

absl::Status CheckDemoTokenizerDir(const std::string& tokenizer_dir) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!std::filesystem::exists(std::filesystem::path(tokenizer_dir) / name)) {
      return absl::NotFoundError(absl::StrCat("no ", name, " in ", tokenizer_dir,
                                              " (tools/fetch-test-data fetches the Qwen3 "
                                              "tokenizer into ",
                                              kDefaultQwen3TokenizerDir, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteDemoTextFiles(const std::string& model_dir, const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  const fs::path from(tokenizer_dir);
  RETURN_IF_ERROR(CheckDemoTokenizerDir(tokenizer_dir));
  RETURN_IF_ERROR(CopyFile(from / "tokenizer.json", fs::path(model_dir) / "tokenizer.json"));

  std::ifstream in(from / "tokenizer_config.json", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::InternalError(
        absl::StrCat("cannot read ", (from / "tokenizer_config.json").string()));
  }
  const std::string config_text = text.str();
  nlohmann::ordered_json config =
      FileJsonTooDeep(config_text)
          ? nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded)
          : nlohmann::ordered_json::parse(config_text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat((from / "tokenizer_config.json").string(), " is not a JSON object"));
  }
  config.erase("chat_template");
  RETURN_IF_ERROR(WriteFile(fs::path(model_dir) / "tokenizer_config.json", config.dump(2) + "\n"));
  return WriteFile(fs::path(model_dir) / "chat_template.jinja", DemoChatTemplate());
}

}  // namespace cairn::infer
