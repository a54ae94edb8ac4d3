#include "services/infer/models/qwen3_hybrid/weight_reader.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::infer {
namespace {

WeightType WeightTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return WeightType::kBF16;
    case DType::kF16:
      return WeightType::kF16;
    case DType::kF32:
    case DType::kOther:  // Refused by Find.
      return WeightType::kF32;
  }
  return WeightType::kF32;
}

}  // namespace

WeightMatrix RowsOf(const WeightMatrix& w, int64_t first, int64_t rows) {
  return WeightMatrix::Of(
      static_cast<const char*>(w.parts[0].data) + first * w.cols * WeightTypeSize(w.type), w.type,
      rows, w.cols);
}

WeightReader::WeightReader(const TensorStore& store, std::string prefix,
                           const KernelBackend& backend, std::vector<std::vector<char>>& owned)
    : store_(store), prefix_(std::move(prefix)), backend_(backend), owned_(owned) {}

bool WeightReader::Has(const std::string& name) const {
  return store_.Find(prefix_ + name) != nullptr;
}

absl::StatusOr<std::vector<float>> WeightReader::Read(const std::string& name, const Shape& shape) {
  ASSIGN_OR_RETURN(const TensorView* t, Find(name, shape, true));
  absl::StatusOr<std::vector<float>> v = ReadAsF32(*t, shape);
  if (v.ok()) Count(t->elements(), sizeof(float));
  return v;
}

absl::StatusOr<WeightMatrix> WeightReader::Matrix(const std::string& name, const Shape& shape,
                                                  bool prefixed) {
  ASSIGN_OR_RETURN(const TensorView* t, Find(name, shape, prefixed));
  const int64_t cols = shape.back();
  const int64_t rows = t->elements() / cols;
  const WeightType type = WeightTypeOf(t->dtype);
  if (backend_.AcceptsWeightType(type)) {
    Count(t->elements(), WeightTypeSize(type));
    in_place_ = true;
    return WeightMatrix::Of(t->data, type, rows, cols);
  }
  ASSIGN_OR_RETURN(std::vector<float> wide, ReadAsF32(*t, shape));
  std::vector<char>& buffer = Own(static_cast<int64_t>(wide.size() * sizeof(float)));
  std::memcpy(buffer.data(), wide.data(), buffer.size());
  Count(t->elements(), sizeof(float));
  return WeightMatrix::Of(buffer.data(), WeightType::kF32, rows, cols);
}

WeightMatrix WeightReader::Concat(const std::vector<WeightMatrix>& parts) {
  int total = 0;
  for (const WeightMatrix& p : parts) total += p.num_parts;
  if (backend_.AcceptsWeightType(parts[0].type) && total <= WeightMatrix::kMaxParts) {
    WeightMatrix w;
    w.type = parts[0].type;
    w.cols = parts[0].cols;
    for (const WeightMatrix& p : parts) {
      for (int i = 0; i < p.num_parts; ++i) w.parts[w.num_parts++] = p.parts[i];
    }
    return w;
  }
  std::vector<RowRange> ranges;
  int64_t first = 0;
  for (const WeightMatrix& p : parts) {
    ranges.push_back({&p, 0, first, p.rows()});
    first += p.rows();
  }
  return Gather(ranges, first);
}

WeightMatrix WeightReader::Gather(const std::vector<RowRange>& ranges, int64_t rows) {
  const WeightMatrix& first = *ranges[0].src;
  const int64_t row_bytes = first.cols * WeightTypeSize(first.type);
  std::vector<char>& buffer = Own(rows * row_bytes);
  for (const RowRange& r : ranges) {
    for (int64_t i = 0; i < r.rows; ++i) {
      const int64_t row = r.src_row + i;
      int part = 0;
      int64_t in_part = row;
      while (in_part >= r.src->parts[part].rows) in_part -= r.src->parts[part++].rows;
      std::memcpy(buffer.data() + (r.dst_row + i) * row_bytes,
                  static_cast<const char*>(r.src->parts[part].data) + in_part * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
  }
  return WeightMatrix::Of(buffer.data(), first.type, rows, first.cols);
}

absl::StatusOr<const TensorView*> WeightReader::Find(const std::string& name, const Shape& shape,
                                                     bool prefixed) const {
  const std::string full = prefixed ? prefix_ + name : name;
  const TensorView* t = store_.Find(full);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("missing tensor ", full));
  RETURN_IF_ERROR(CheckReadable(*t));
  RETURN_IF_ERROR(CheckShape(*t, shape));
  return t;
}

void WeightReader::Count(int64_t elements, int64_t element_bytes) {
  parameters_ += elements;
  bytes_ += elements * element_bytes;
}

std::vector<char>& WeightReader::Own(int64_t bytes) {
  owned_.emplace_back(static_cast<size_t>(bytes));
  return owned_.back();
}

}  // namespace cairn::infer
