#ifndef CAIRN_SERVICES_INFER_MODELS_WEIGHTS_DIGEST_H_
#define CAIRN_SERVICES_INFER_MODELS_WEIGHTS_DIGEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/models/load_progress.h"

namespace cairn::infer {

struct WeightsDigestOptions {
  // JSON file remembering each weight file's digest by path, size and mtime, so an unchanged
  // checkpoint is not read again. Empty: no cache.
  std::string cache_path;
  // Progress of the files read (phase "hashing the weights", in bytes of the files not found
  // in the cache; no report when every file is).
  LoadProgressFn progress;
};

// Returns an XXH3 digest over the weight `files` (their base names and contents, in the given
// order). File digests are reused from the cache when path, size and mtime match, and the
// cache is rewritten (atomically) when something was computed. A cache that cannot be read
// or written is ignored (logged), never an error; an unreadable weight file is.
absl::StatusOr<uint64_t> ComputeWeightsDigest(const std::vector<std::string>& files,
                                              const WeightsDigestOptions& options);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_WEIGHTS_DIGEST_H_
