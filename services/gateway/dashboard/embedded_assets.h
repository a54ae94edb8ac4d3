#ifndef CAIRN_SERVICES_GATEWAY_DASHBOARD_EMBEDDED_ASSETS_H_
#define CAIRN_SERVICES_GATEWAY_DASHBOARD_EMBEDDED_ASSETS_H_

// The dashboard's static files (dashboard/assets/), compiled into the binary by a CMake step
// (embed_assets.cmake), so that the page needs no file on disk and no network resource.

#include <cstddef>

#include "absl/strings/string_view.h"

namespace cairn::gateway {

struct EmbeddedAsset {
  const char* name;  // Path under dashboard/assets/, e.g. "dashboard.js".
  const unsigned char* data;
  size_t size;
};

extern const EmbeddedAsset kEmbeddedAssets[];
extern const int kEmbeddedAssetCount;

// Returns the asset called `name`, or nullptr.
const EmbeddedAsset* FindEmbeddedAsset(absl::string_view name);
// The Content-Type for an asset's name, by its extension.
absl::string_view AssetContentType(absl::string_view name);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_DASHBOARD_EMBEDDED_ASSETS_H_
