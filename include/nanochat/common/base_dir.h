// Where every artifact lives: $NANOCHAT_BASE_DIR, default ~/.cache/nanochat (as upstream's get_base_dir).
#pragma once
#include <cstdint>
#include <string>

namespace nanochat {

std::string base_dir();                             // created on demand; Error if it cannot be
std::string base_dir_path(const std::string& sub);  // base_dir()/sub (not created)
int64_t free_disk_bytes(const std::string& path);   // -1 if unknown

}  // namespace nanochat
