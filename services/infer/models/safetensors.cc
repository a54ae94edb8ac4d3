#include "services/infer/models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json/json_scan.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/kernels/half_float.h"

namespace cairn::infer {
namespace {

// Largest header we accept; real checkpoints have headers well under this.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct ParsedDType {
  DType dtype;
  int size;  // Bytes an element; 0 where the format's list does not say (a newer dtype).
};

ParsedDType ParseDType(const std::string& s) {
  if (s == "F32") return {DType::kF32, 4};
  if (s == "F16") return {DType::kF16, 2};
  if (s == "BF16") return {DType::kBF16, 2};
  if (s == "F64" || s == "I64" || s == "U64") return {DType::kOther, 8};
  if (s == "I32" || s == "U32") return {DType::kOther, 4};
  if (s == "I16" || s == "U16") return {DType::kOther, 2};
  if (s == "BOOL" || s == "U8" || s == "I8" || s == "F8_E4M3" || s == "F8_E5M2") {
    return {DType::kOther, 1};
  }
  return {DType::kOther, 0};
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kOther:
      return "a dtype Cairn does not read";
  }
  return "?";
}

int DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kOther:
      return 0;
  }
  return 0;
}

absl::Status CheckReadable(const TensorView& t) {
  if (t.dtype != DType::kOther) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " in ", t.file, " has dtype ",
                                                 t.dtype_name,
                                                 "; Cairn reads F32, F16 and BF16 tensors"));
}

int64_t TensorView::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t h) { return WidenBf16(h); }

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const std::string base = std::filesystem::path(path).filename().string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("cannot stat ", path));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(base, ": truncated (", size, " bytes)"));
  }
  // Populated at once: every weight is read at load time (packed, uploaded, or streamed by the
  // first decode step), and mapping the pages in one call costs less than a fault every few
  // pages (loading bench-500m with its matrices packed: 3.4 -> 3.0 s on the development VM).
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return absl::InvalidArgumentError(absl::StrCat("cannot map ", path));
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->map_ = map;
  file->map_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(base, ": truncated or corrupt header (",
                                                   header_len, " header bytes, file ", size,
                                                   " bytes)"));
  }
  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  nlohmann::json header =
      nlohmann::json::parse(bytes + 8, data, nullptr, /*allow_exceptions=*/false);
  struct DataRange {
    uint64_t begin;
    uint64_t end;
    std::string name;
    bool operator<(const DataRange& o) const {
      return std::tie(begin, end, name) < std::tie(o.begin, o.end, o.name);
    }
  };
  std::vector<DataRange> ranges;
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(base, ": header is not a JSON object"));
  }
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const nlohmann::json& v = it.value();
    const std::string where = absl::StrCat(base, ": tensor ", it.key());
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": malformed header entry"));
    }
    TensorView t;
    t.name = it.key();
    t.file = base;
    t.dtype_name = v["dtype"].get<std::string>();
    const ParsedDType dtype = ParseDType(t.dtype_name);
    t.dtype = dtype.dtype;
    int64_t elements = 1;  // Overflow-checked: the shape comes from the file.
    for (const nlohmann::json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": bad shape"));
      }
      t.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(elements, t.shape.back(), &elements)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": shape ", ShapeText(t.shape), " has too many elements"));
      }
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": bad data_offsets"));
    }
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": data [", begin, ", ", end,
                                                     ") past the end of the file (", data_size,
                                                     " data bytes): truncated file"));
    }
    t.bytes = static_cast<int64_t>(end - begin);
    int64_t expected_bytes = 0;
    if (dtype.size > 0 && (__builtin_mul_overflow(elements, dtype.size, &expected_bytes) ||
                           t.bytes != expected_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", t.bytes, " bytes for shape ",
                                                     ShapeText(t.shape), " of ", t.dtype_name));
    }
    t.data = data + begin;
    // The format pads the header so that every tensor is aligned, but a writer that does not
    // (an unpadded header, odd offsets) would leave one we read through typed pointers
    // misaligned: such a tensor is read from an aligned copy instead.
    const int readable_size = DTypeSize(t.dtype);
    if (readable_size > 0 && t.bytes > 0 &&
        reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(readable_size) != 0) {
      auto copy = std::make_unique<uint64_t[]>((static_cast<size_t>(t.bytes) + 7) / 8);
      std::memcpy(copy.get(), t.data, static_cast<size_t>(t.bytes));
      t.data = reinterpret_cast<const uint8_t*>(copy.get());
      file->aligned_copies_.push_back(std::move(copy));
    }
    ranges.push_back({begin, end, t.name});
    file->tensors_.emplace(t.name, std::move(t));
  }
  // No two tensors may share bytes (the format forbids it: one would alias another). Gaps
  // between tensors and bytes past the last one are accepted, as they always were here.
  std::sort(ranges.begin(), ranges.end());
  const DataRange* previous = nullptr;
  for (const DataRange& r : ranges) {
    if (r.begin == r.end) continue;  // An empty tensor shares no bytes.
    if (previous != nullptr && r.begin < previous->end) {
      return absl::InvalidArgumentError(absl::StrCat(
          base, ": tensors ", previous->name, " [", previous->begin, ", ", previous->end, ") and ",
          r.name, " [", r.begin, ", ", r.end, ") overlap; every tensor must have its own bytes"));
    }
    if (previous == nullptr || r.end > previous->end) previous = &r;
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::FromViews(std::vector<TensorView> views) {
  auto store = std::unique_ptr<TensorStore>(new TensorStore());
  for (TensorView& v : views) {
    if (v.dtype == DType::kOther || v.bytes != v.elements() * DTypeSize(v.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", v.name, ": ", v.bytes,
                                                     " bytes do not match its dtype and shape"));
    }
    const std::string name = v.name;
    auto [it, inserted] = store->memory_views_.emplace(name, std::move(v));
    if (!inserted) return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " given twice"));
    store->index_.emplace(name, &it->second);
  }
  return store;
}

absl::StatusOr<std::unique_ptr<TensorStore>> TensorStore::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto store = std::unique_ptr<TensorStore>(new TensorStore());
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  std::map<std::string, std::string> weight_map;  // tensor -> shard base name
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string index_text = text.str();
    const nlohmann::json index = FileJsonTooDeep(index_text)
                                     ? nlohmann::json(nlohmann::json::value_t::discarded)
                                     : nlohmann::json::parse(index_text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": not a safetensors index (no weight_map)"));
    }
    std::set<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string() || it.value().get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path.string(), ": bad shard name for ", it.key()));
      }
      weight_map[it.key()] = it.value().get<std::string>();
      shards.insert(it.value().get<std::string>());
    }
    for (const std::string& s : shards) store->files_.push_back((fs::path(dir) / s).string());
  } else {
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") store->files_.push_back(e.path().string());
    }
    if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
    std::sort(store->files_.begin(), store->files_.end());
  }
  if (store->files_.empty()) {
    return absl::NotFoundError(absl::StrCat("no *.safetensors files in ", dir));
  }
  for (const std::string& path : store->files_) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard, SafetensorsFile::Open(path));
    for (const auto& [name, view] : shard->tensors()) {
      auto [it, inserted] = store->index_.emplace(name, &view);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", name, " is in both ", it->second->file, " and ", view.file));
      }
    }
    store->shards_.push_back(std::move(shard));
  }
  for (const auto& [name, shard] : weight_map) {
    const TensorView* t = store->Find(name);
    if (t == nullptr || t->file != shard) {
      return absl::InvalidArgumentError(
          absl::StrCat("index names tensor ", name, " in ", shard, " but it is not there"));
    }
  }
  return store;
}

const TensorView* TensorStore::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

absl::Status CheckShape(const TensorView& t, const std::vector<int64_t>& shape) {
  if (t.shape == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " in ", t.file, " has shape ",
                                                 ShapeText(t.shape), ", expected ",
                                                 ShapeText(shape)));
}

absl::StatusOr<std::vector<float>> ReadAsF32(const TensorView& t,
                                             const std::vector<int64_t>& shape) {
  RETURN_IF_ERROR(CheckReadable(t));
  RETURN_IF_ERROR(CheckShape(t, shape));
  const int64_t n = t.elements();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out.data(), t.data, n * 4);  // An empty tensor has no buffer.
      break;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::kBF16 ? Bf16ToFloat(h) : WidenF16(h);
      }
      break;
    case DType::kOther:
      break;  // Refused above.
  }
  return out;
}

}  // namespace cairn::infer
