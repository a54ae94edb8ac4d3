#ifndef CAIRN_SERVICES_INFER_TEXT_TEXT_COMMAND_H_
#define CAIRN_SERVICES_INFER_TEXT_TEXT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace cairn::infer::text {

// The text modes of cairn-run. Exactly one of `tokenize_file`, `tokenize_batch_file` and
// `render_file` is set.
struct TextCommandOptions {
  // Hugging Face model folder: tokenizer.json, and tokenizer_config.json / chat_template.jinja
  // for --render. Weights are not read.
  std::string model_dir;
  // --tokenize-file FILE: prints {"ids": [...]} for the file's text (UTF-8).
  std::string tokenize_file;
  // --tokenize-batch FILE: JSON Lines, one case a line, answered by one line each, in order (the
  // differential test's batch; tests/README.md):
  //   {"encode_hex": "68c3a9"}  -> {"ids": [...]} or {"error": "..."} (the text as the hex of its
  //                                bytes, so that invalid UTF-8 can be sent)
  //   {"decode": [ids], "skip_special": false}
  //                             -> {"text": Decode(ids), "stream": the StreamingDecoder's pieces
  //                                joined, then its Flush(), "stream_pieces_valid": every piece
  //                                valid UTF-8} or {"error": "..."}
  // A line that is neither is an InvalidArgument error for the whole run.
  std::string tokenize_batch_file;
  // --render FILE: reads {"messages": [...], "tools": [...], "add_generation_prompt": bool,
  // "enable_thinking": bool, ...} and prints {"text": ..., "ids": [...], "stable_boundary": K}.
  std::string render_file;
  // --json: one compact line; otherwise indented.
  bool json = true;
};

// Runs one text mode and writes its JSON object (and a newline) to `out`. Errors:
// InvalidArgument for bad options, malformed input or unsupported tokenizer/template content,
// NotFound for missing files, FailedPrecondition when the template raises.
absl::Status RunTextCommand(const TextCommandOptions& options, std::ostream& out);

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_TEXT_COMMAND_H_
