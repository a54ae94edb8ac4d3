#include "services/gateway/dashboard/embedded_assets.h"

#include "absl/strings/match.h"

namespace cairn::gateway {

const EmbeddedAsset* FindEmbeddedAsset(absl::string_view name) {
  for (int i = 0; i < kEmbeddedAssetCount; ++i) {
    if (name == kEmbeddedAssets[i].name) return &kEmbeddedAssets[i];
  }
  return nullptr;
}

absl::string_view AssetContentType(absl::string_view name) {
  if (absl::EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(name, ".css")) return "text/css; charset=utf-8";
  if (absl::EndsWith(name, ".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace cairn::gateway
