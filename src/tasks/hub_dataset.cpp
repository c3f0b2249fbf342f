// Hub datasets through the parquet listing API (upstream tasks/common.py load_hub_dataset):
// listing -> shards -> manifest.json last, under one lock; rows kept as compact JSON.
#include <unistd.h>

#include "nanochat/common/atomic_file.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/file_lock.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "nanochat/parquet.h"
#include "nanochat/tasks.h"
#include "tasks/np_random.h"

#include <fstream>
#include <sstream>

namespace nanochat {

const std::vector<HubSplit> kTaskDataSplits = {
    {"HuggingFaceTB/smol-smoltalk", "default", "train"},
    {"HuggingFaceTB/smol-smoltalk", "default", "test"},
    {"cais/mmlu", "all", "auxiliary_train"},
    {"cais/mmlu", "all", "test"},
    {"openai/gsm8k", "main", "train"},
    {"openai/gsm8k", "main", "test"},
    {"allenai/ai2_arc", "ARC-Easy", "test"},
    {"allenai/ai2_arc", "ARC-Challenge", "test"},
    {"openai/openai_humaneval", "openai_humaneval", "test"},
};

std::string hub_endpoint() {
  std::string e = env_get("HF_ENDPOINT").value_or("https://huggingface.co");
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string hub_split_dir(const HubSplit& s) {
  std::string slug;  // "/" -> "--"
  for (char c : s.repo_id) slug += c == '/' ? std::string("--") : std::string(1, c);
  return base_dir_path("task_data/" + slug + "/" + s.subset + "/" + s.split);
}

static std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read %s", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static std::vector<std::string> read_manifest(const std::string& dir) {
  std::string path = dir + "/manifest.json";
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(slurp(path));
  } catch (const nlohmann::json::exception& e) {
    fail("%s: not valid JSON (%s); delete it and run `nanochat download tasks` again", path.c_str(), e.what());
  }
  if (!m.is_array()) fail("%s: expected a JSON list of shard names", path.c_str());
  std::vector<std::string> paths;
  for (auto& n : m) {
    if (!n.is_string()) fail("%s: expected a JSON list of shard names", path.c_str());
    paths.push_back(dir + "/" + n.get<std::string>());
  }
  return paths;
}

// the listing: a JSON list of shard URLs
static std::vector<std::string> parse_listing(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("%s: the parquet listing is not JSON (%s)", what.c_str(), e.what());
  }
  if (!j.is_array() || j.empty()) fail("%s: the parquet listing must be a non-empty JSON list of URLs", what.c_str());
  std::vector<std::string> urls;
  for (auto& u : j) {
    if (!u.is_string()) fail("%s: the parquet listing must be a JSON list of URL strings", what.c_str());
    urls.push_back(u.get<std::string>());
  }
  return urls;
}

std::vector<std::string> hub_download(const HubSplit& s, const DownloadOptions& opts) {
  std::string dir = hub_split_dir(s), manifest = dir + "/manifest.json";
  if (path_exists(manifest)) return read_manifest(dir);
  make_dirs(dir);
  std::string what = s.repo_id + " " + s.subset + "/" + s.split;
  // one rank downloads, the others wait here and then find the manifest
  FileLock lock(manifest + ".lock", [&] { log_info("waiting for another process downloading %s", what.c_str()); });
  if (path_exists(manifest)) return read_manifest(dir);

  std::string listing_url = hub_endpoint() + "/api/datasets/" + s.repo_id + "/parquet/" + s.subset + "/" + s.split;
  std::string listing_path = dir + "/listing.json";
  ::unlink(listing_path.c_str());  // always ask again: the mirror or the export may have changed
  DownloadOptions lo = opts;
  lo.verify = [&](const std::string& tmp) { parse_listing(slurp(tmp), listing_url); };
  lo.on_bytes = nullptr, lo.on_total = nullptr;
  download_file(listing_url, listing_path, lo);
  std::vector<std::string> urls = parse_listing(slurp(listing_path), listing_url);

  nlohmann::json names = nlohmann::json::array();
  std::vector<std::string> paths;
  DownloadOptions so = opts;
  so.verify = download_verify_parquet;
  for (size_t i = 0; i < urls.size(); i++) {
    std::string name = strprintf("%05zu.parquet", i);
    log_info("download %s: shard %zu/%zu %s", what.c_str(), i + 1, urls.size(), urls[i].c_str());
    download_file(urls[i], dir + "/" + name, so);
    names.push_back(name);
    paths.push_back(dir + "/" + name);
  }
  atomic_write_file(manifest, names.dump());  // last: its presence means the split is complete
  return paths;
}

HubDataset HubDataset::from_parquet(const std::vector<std::string>& paths) {
  HubDataset d;
  for (auto& p : paths) {
    ParquetFile f(p);
    for (int rg = 0; rg < f.num_row_groups(); rg++)
      for (auto& row : f.read_rows_json(rg)) d.rows_.push_back(row.dump());
  }
  return d;
}

HubDataset HubDataset::load(const HubSplit& s) {
  HubDataset d = from_parquet(hub_download(s));
  if (d.size() == 0)
    fail("%s %s/%s has no rows (in %s)", s.repo_id.c_str(), s.subset.c_str(), s.split.c_str(),
         hub_split_dir(s).c_str());
  return d;
}

void HubDataset::shuffle(uint64_t seed) { perm_ = np_permutation(seed, size()); }

nlohmann::json HubDataset::row(int64_t i) const {
  if (i < 0 || i >= size()) fail("dataset row %lld out of range (%lld rows)", (long long)i, (long long)size());
  return nlohmann::json::parse(rows_[(size_t)(perm_.empty() ? i : perm_[(size_t)i])]);
}

}  // namespace nanochat
