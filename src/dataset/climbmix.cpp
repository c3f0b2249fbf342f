// The ClimbMix shard set of upstream's nanochat/dataset.py: names, URLs, which ids a download fetches, and the
// local directory with its legacy fallback.
#include <algorithm>
#include <dirent.h>

#include "nanochat/common/base_dir.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "nanochat/dataset.h"

namespace nanochat {

std::string climbmix_shard_name(int index) { return strprintf("shard_%05d.parquet", index); }

std::string climbmix_shard_url(const std::string& base_url, int index) {
  std::string base = base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/" + climbmix_shard_name(index);
}

std::vector<int> climbmix_shard_ids(int num_files) {
  int n = num_files < 0 ? kClimbmixMaxShard : std::min(num_files, kClimbmixMaxShard);
  std::vector<int> ids;
  for (int i = 0; i < n; i++) ids.push_back(i);
  ids.push_back(kClimbmixMaxShard);  // the val shard, always
  return ids;
}

std::string dataset_dir() {
  std::string dir = base_dir_path("base_data_climbmix");
  if (is_directory(dir)) return dir;
  std::string legacy = base_dir_path("base_data");
  if (!is_directory(legacy)) return dir;
  if (log_rank_prints())
    log_warn(
        "using the legacy FineWeb-EDU shards in %s: base_data_climbmix/ is missing. nanochat now "
        "pretrains on ClimbMix; run `nanochat download` to get it",
        legacy.c_str());
  return legacy;
}

std::vector<std::string> dataset_list_parquet_files(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (!d) return files;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    const std::string ext = ".parquet";
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0 && name[0] != '.')
      files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace nanochat
