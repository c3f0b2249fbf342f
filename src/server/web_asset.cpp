// Lookup in the table web/embed_web.cmake generates (server_web_assets).
#include "nanochat/server.h"

namespace nanochat {

const WebAsset* server_web_asset(const std::string& path) {
  for (const WebAsset& a : server_web_assets())
    if (path == a.path) return &a;
  return nullptr;
}

}  // namespace nanochat
