#ifndef CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_WEIGHT_READER_H_
#define CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_WEIGHT_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/kernels/kernel_backend.h"
#include "services/infer/models/safetensors.h"

namespace cairn::infer {

// Rows [first, first + rows) of the one-part row-major matrix `w`.
WeightMatrix RowsOf(const WeightMatrix& w, int64_t first, int64_t rows);

// Reads a checkpoint's tensors by name (relative to a prefix) for Qwen3HybridModel: vectors as
// fp32 copies, matrices as WeightMatrix views. A matrix stays in the mapped checkpoint, in the
// file's type, when the backend takes that type; otherwise it is widened into a buffer of
// `owned`. Counts parameters and the bytes the model holds them in.
// Thread-compatible; lives for one model's Load.
class WeightReader {
 public:
  using Shape = std::vector<int64_t>;

  WeightReader(const TensorStore& store, std::string prefix, const KernelBackend& backend,
               std::vector<std::vector<char>>& owned);

  bool Has(const std::string& name) const;

  // The vector (or any tensor) `name` of shape `shape`, widened to fp32.
  absl::StatusOr<std::vector<float>> Read(const std::string& name, const Shape& shape);

  // The matrix `name` of shape [rows, cols] (or [a, b, cols] read as [a * b, cols]).
  absl::StatusOr<WeightMatrix> Matrix(const std::string& name, const Shape& shape,
                                      bool prefixed = true);

  // One matrix whose rows are those of `parts` in order (all of one type and width): a view
  // of the parts where the backend takes them so, else a copy.
  WeightMatrix Concat(const std::vector<WeightMatrix>& parts);

  // Rows `rows` of `src` (one part) go to rows starting at `dst` of a new matrix.
  struct RowRange {
    const WeightMatrix* src;
    int64_t src_row;
    int64_t dst_row;
    int64_t rows;
  };
  // A copy holding the rows `ranges` name, `rows` rows in all, in their type.
  WeightMatrix Gather(const std::vector<RowRange>& ranges, int64_t rows);

  int64_t parameters() const { return parameters_; }
  int64_t bytes() const { return bytes_; }
  // Whether some matrix was returned in place (the store must outlive the model).
  bool in_place() const { return in_place_; }

 private:
  absl::StatusOr<const TensorView*> Find(const std::string& name, const Shape& shape,
                                         bool prefixed) const;
  void Count(int64_t elements, int64_t element_bytes);
  std::vector<char>& Own(int64_t bytes);

  const TensorStore& store_;
  const std::string prefix_;
  const KernelBackend& backend_;
  std::vector<std::vector<char>>& owned_;
  int64_t parameters_ = 0;
  int64_t bytes_ = 0;
  bool in_place_ = false;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_WEIGHT_READER_H_
