// Small POSIX file helpers. Why not std::filesystem: the torch wheel exports its own copy of
// libstdc++'s filesystem library (built with a newer GCC) from libtorch.so, and the dynamic
// linker binds our calls to it; some of those functions (remove_all) crash with Debian's
// libstdc++. Project code therefore uses these instead.
#pragma once
#include <string>

namespace nanochat {

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_dirs(const std::string& path);               // mkdir -p; Error naming the path on failure
std::string parent_dir(const std::string& path);       // "a/b/c" -> "a/b", "c" -> "."
void remove_tree(const std::string& path);             // rm -rf; missing path is fine
void fsync_parent_dir(const std::string& path);        // makes a rename into that directory durable
std::string read_file_bytes(const std::string& path);  // the whole file; Error naming the path

}  // namespace nanochat
