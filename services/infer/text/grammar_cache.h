#ifndef CAIRN_SERVICES_INFER_TEXT_GRAMMAR_CACHE_H_
#define CAIRN_SERVICES_INFER_TEXT_GRAMMAR_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/concurrency/mutex.h"
#include "services/infer/text/json_constraint.h"

namespace cairn::infer::text {

// Compiled grammars kept by the text they came from (a response format's schema, or a request's
// tools and tool choice), so that a client that sends the same schema or tools every turn, as
// agents do, compiles them once (a forced call over 64 functions: about 4 ms). Past
// `max_entries` entries or `max_key_bytes` of keys the least recently used go first; errors
// are not kept.
//
// Thread-safe: the request handlers share one; compiling runs outside the lock (two handlers
// may compile one key at once, and the second result is kept).
class GrammarCache {
 public:
  GrammarCache(size_t max_entries, size_t max_key_bytes)
      : max_entries_(max_entries), max_key_bytes_(max_key_bytes) {}

  // Returns the grammar kept for `key` (nullptr included), or the result of `compile`, kept
  // when it is not an error and the key fits.
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> GetOrCompile(
      const std::string& key,
      absl::FunctionRef<absl::StatusOr<std::shared_ptr<const JsonGrammar>>()> compile)
      ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::shared_ptr<const JsonGrammar> grammar;
    uint64_t last_use = 0;
  };

  const size_t max_entries_;
  const size_t max_key_bytes_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t key_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_GRAMMAR_CACHE_H_
