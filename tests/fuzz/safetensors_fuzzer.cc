// safetensors files: the 8-byte header length, the JSON header (dtypes, shapes, offsets) and
// the data it describes, opened and mapped as the model loader does, then every small tensor
// read. The file lives in a memfd, opened through its /proc/self/fd path.

#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status/check.h"
#include "services/infer/models/safetensors.h"
#include "tests/fuzz/fuzz_target.h"

CAIRN_FUZZ_TARGET(Safetensors) {
  const int fd = memfd_create("cairn-fuzz-safetensors", MFD_CLOEXEC);
  CAIRN_CHECK(fd >= 0);
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    CAIRN_CHECK(n > 0);
    written += static_cast<size_t>(n);
  }
  absl::StatusOr<std::unique_ptr<cairn::infer::SafetensorsFile>> file =
      cairn::infer::SafetensorsFile::Open(absl::StrCat("/proc/self/fd/", fd));
  close(fd);  // The mapping, if any, keeps the memory.
  if (!file.ok()) return 0;
  for (const auto& [name, tensor] : (*file)->tensors()) {
    CAIRN_CHECK(tensor.bytes >= 0);
    if (tensor.elements() <= (1 << 16)) {
      cairn::infer::ReadAsF32(tensor, tensor.shape).IgnoreError();
    }
  }
  return 0;
}
