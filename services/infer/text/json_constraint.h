#ifndef CAIRN_SERVICES_INFER_TEXT_JSON_CONSTRAINT_H_
#define CAIRN_SERVICES_INFER_TEXT_JSON_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer::text {

// A JSON schema compiled into the grammar of the texts it accepts (structured outputs).
// Immutable once built; shared by the requests that use it. Thread-safe.
class JsonGrammar {
 public:
  // Any JSON object (OpenAI's response_format {"type": "json_object"}).
  static std::shared_ptr<const JsonGrammar> AnyObject();
  // The texts that are one JSON value valid under `schema_json` (a JSON Schema document).
  // InvalidArgument naming the keyword (and its path in the schema) for what is not JSON, not
  // a schema, or uses a keyword that narrows values which this grammar does not implement
  // (never a grammar that would accept values the schema refuses). The subset, the bounds and
  // the texts generated (whitespace, numbers, property order) are in services/infer/text/README.md.
  static absl::StatusOr<std::shared_ptr<const JsonGrammar>> FromSchema(
      std::string_view schema_json);

  virtual ~JsonGrammar() = default;
};

// The tokenizer's ids as byte strings, arranged for computing masks (built once per loaded
// tokenizer, shared by every request). Thread-safe once built.
class TokenIndex {
 public:
  static std::unique_ptr<TokenIndex> Build(const Tokenizer& tokenizer);
  virtual ~TokenIndex() = default;
  // One more than the largest id the tokenizer has.
  virtual int32_t id_limit() const = 0;
};

// One request's position in a JsonGrammar, as tokens: which ids may come next, and the
// position after one of them. `end_ids` (the template's end-of-turn and the EOS tokens) are
// allowed exactly where the text so far is one complete value, and the only ones allowed
// once no byte can extend it. Special tokens other than `end_ids` are never allowed.
//
// Thread-compatible: one request's.
class JsonConstraint {
 public:
  static std::unique_ptr<JsonConstraint> Create(std::shared_ptr<const JsonGrammar> grammar,
                                                const TokenIndex* index,
                                                std::vector<TokenId> end_ids);
  virtual ~JsonConstraint() = default;

  // As TokenConstraint::Allowed (services/infer/engine/token_constraint.h): bit (id % 64) of
  // word id / 64 set for each id that may come next, every other bit cleared.
  virtual absl::Status Allowed(absl::Span<uint64_t> allowed) = 0;
  // Advances past `token`; FailedPrecondition if the grammar does not allow it here.
  virtual absl::Status Accept(TokenId token) = 0;
  // Whether the bytes so far are one complete value.
  virtual bool Complete() const = 0;
  // Whether the next token is free (TokenConstraint::Unconstrained): then Allowed allows every
  // id and Accept takes any.
  virtual bool Unconstrained() const { return false; }
};

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_JSON_CONSTRAINT_H_
