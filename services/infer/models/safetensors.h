#ifndef CAIRN_SERVICES_INFER_MODELS_SAFETENSORS_H_
#define CAIRN_SERVICES_INFER_MODELS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::infer {

// kOther: any dtype Cairn does not compute with (I64, F8_E4M3, ...). A file may hold such
// tensors (a checkpoint's buffers or parts Cairn does not load); reading one is an error.
enum class DType { kF32, kF16, kBF16, kOther };

absl::string_view DTypeName(DType dtype);
// Bytes an element of F32, F16 or BF16 (0 for kOther).
int DTypeSize(DType dtype);

// A tensor inside a mapped safetensors file. `data` points into the mapping and lives as long
// as the SafetensorsFile (or TensorStore) it came from.
struct TensorView {
  std::string name;
  std::string file;  // Base name of the file holding it.
  DType dtype = DType::kF32;
  std::string dtype_name;  // As the file names it ("BF16", "I64", ...); empty in memory views.
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t bytes = 0;

  int64_t elements() const;
};

// One mmapped *.safetensors file (8-byte little-endian header length, JSON header, data).
// Thread-safe after Open (read-only).
class SafetensorsFile {
 public:
  // Maps `path` and parses its header. InvalidArgument naming the file for a bad header,
  // offsets that disagree with the shape and dtype, data past the end of the file (a
  // truncated file), or tensors whose bytes overlap (naming both); NotFound when it does not
  // exist. Gaps between tensors are accepted. Tensors of dtypes Cairn does not read
  // (DType::kOther) are listed; ReadAsF32 and the model's loader refuse them by name. An F32,
  // F16 or BF16 tensor whose data is not aligned to its element size in the mapping (a writer
  // that did not pad the header to 8 bytes) is copied to aligned memory the file owns, so
  // every view's `data` may be read through pointers of its element type.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;

  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  // Aligned copies of the tensors whose data in the mapping is misaligned.
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies_;
};

// All tensors of a Hugging Face checkpoint folder: the shards named by
// model.safetensors.index.json when it exists, otherwise every *.safetensors file.
// Thread-safe after Open (read-only).
class TensorStore {
 public:
  // NotFound when the folder has no safetensors; InvalidArgument for a bad index, a tensor
  // named by the index but missing from its shard, or a tensor present in two files.
  static absl::StatusOr<std::unique_ptr<TensorStore>> Open(const std::string& dir);
  // A store over tensors already in memory (benchmarks build random models this way): the
  // views' data must outlive the store. InvalidArgument for a name given twice or a view whose
  // byte count disagrees with its dtype and shape.
  static absl::StatusOr<std::unique_ptr<TensorStore>> FromViews(std::vector<TensorView> views);

  // Returns the tensor `name` or nullptr.
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, const TensorView*>& tensors() const { return index_; }
  // The files the tensors came from, in sorted order (full paths).
  const std::vector<std::string>& files() const { return files_; }

 private:
  TensorStore() = default;

  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, TensorView> memory_views_;  // FromViews.
  std::vector<std::string> files_;
  std::map<std::string, const TensorView*> index_;
};

// OK for a tensor of F32, F16 or BF16; InvalidArgument naming the tensor, its file and its
// dtype otherwise.
absl::Status CheckReadable(const TensorView& t);

// Returns InvalidArgument naming the tensor and both shapes unless `tensor` has shape `shape`.
absl::Status CheckShape(const TensorView& tensor, const std::vector<int64_t>& shape);

// Widens `tensor` (bf16, f16 or f32) to fp32 after checking its shape is `shape`.
// InvalidArgument naming the tensor and both shapes on a mismatch.
absl::StatusOr<std::vector<float>> ReadAsF32(const TensorView& tensor,
                                             const std::vector<int64_t>& shape);

// Encodes fp32 values as bf16 (round to nearest even) and back.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_SAFETENSORS_H_
