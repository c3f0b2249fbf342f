// The CORE eval bundle (upstream's eval_bundle.zip): core.yaml (yaml-cpp), eval_meta_data.csv (a small
// RFC 4180 reader: the file has quoted fields with commas), and the zip (libzip), placed
// like upstream's place_eval_bundle: unzip into a temp dir, move eval_bundle/ into place.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

#include <yaml-cpp/yaml.h>
#include <zip.h>

#include "nanochat/common/file_lock.h"
#include "nanochat/common.h"
#include "nanochat/core_eval.h"

namespace nanochat {

static std::string read_text(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read %s %s: %s", what, path.c_str(), std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// rows of fields; quotes may hold commas, newlines and "" for a quote
static std::vector<std::vector<std::string>> csv_parse(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false, any = false;
  size_t i = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // a UTF-8 BOM
  for (; i < text.size(); i++) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', i++;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true, any = true;
    } else if (c == ',') {
      rows.back().push_back(field), field.clear(), any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') i++;
      if (any || !field.empty()) rows.back().push_back(field);
      field.clear(), any = false;
      if (!rows.back().empty()) rows.emplace_back();
    } else {
      field += c, any = true;
    }
  }
  if (any || !field.empty()) rows.back().push_back(field);
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

static std::map<std::string, double> read_random_baselines(const std::string& path) {
  auto rows = csv_parse(read_text(path, "the CORE metadata"));
  if (rows.empty()) fail("%s is empty", path.c_str());
  int task_col = -1, rb_col = -1;
  for (size_t c = 0; c < rows[0].size(); c++) {
    if (rows[0][c] == "Eval Task") task_col = (int)c;
    if (rows[0][c] == "Random baseline") rb_col = (int)c;
  }
  if (task_col < 0 || rb_col < 0) fail("%s: no 'Eval Task' and 'Random baseline' columns in the header", path.c_str());
  std::map<std::string, double> out;
  for (size_t r = 1; r < rows.size(); r++) {
    if ((int)rows[r].size() <= std::max(task_col, rb_col)) fail("%s: row %zu has too few fields", path.c_str(), r + 1);
    const std::string& v = rows[r][rb_col];
    char* end = nullptr;
    double rb = std::strtod(v.c_str(), &end);
    if (v.empty() || *end) fail("%s: row %zu: 'Random baseline' is '%s', not a number", path.c_str(), r + 1, v.c_str());
    out[rows[r][task_col]] = rb;
  }
  return out;
}

std::vector<CoreTaskSpec> core_bundle_load(const std::string& dir) {
  std::string yaml_path = dir + "/core.yaml";
  auto baselines = read_random_baselines(dir + "/eval_meta_data.csv");
  YAML::Node root;
  try {
    root = YAML::LoadFile(yaml_path);
  } catch (const YAML::Exception& e) {
    fail("%s: %s", yaml_path.c_str(), e.what());
  }
  YAML::Node tasks = root["icl_tasks"];
  if (!tasks || !tasks.IsSequence()) fail("%s: no icl_tasks list", yaml_path.c_str());
  std::vector<CoreTaskSpec> out;
  for (size_t i = 0; i < tasks.size(); i++) {
    const YAML::Node& t = tasks[i];
    CoreTaskSpec s;
    try {
      if (!t["label"] || !t["dataset_uri"] || !t["icl_task_type"] || !t["num_fewshot"])
        fail("entry %zu needs label, dataset_uri, icl_task_type and num_fewshot", i + 1);
      s.label = t["label"].as<std::string>();
      s.dataset_uri = t["dataset_uri"].as<std::string>();
      s.type = t["icl_task_type"].as<std::string>();
      const YAML::Node& shots = t["num_fewshot"];
      s.num_fewshot = shots.IsSequence() ? shots[0].as<int64_t>() : shots.as<int64_t>();
      if (t["continuation_delimiter"]) s.continuation_delimiter = t["continuation_delimiter"].as<std::string>();
    } catch (const YAML::Exception& e) {
      fail("%s: icl_tasks entry %zu: %s", yaml_path.c_str(), i + 1, e.what());
    } catch (const Error& e) {
      fail("%s: %s", yaml_path.c_str(), e.what());
    }
    if (s.type != "multiple_choice" && s.type != "schema" && s.type != "language_modeling")
      fail("%s: task %s has the unknown icl_task_type '%s' (known: multiple_choice, schema, language_modeling)",
           yaml_path.c_str(), s.label.c_str(), s.type.c_str());
    if (s.num_fewshot < 0) fail("%s: task %s: num_fewshot is negative", yaml_path.c_str(), s.label.c_str());
    auto rb = baselines.find(s.label);
    if (rb == baselines.end())
      fail("%s: no 'Random baseline' row for task %s", (dir + "/eval_meta_data.csv").c_str(), s.label.c_str());
    s.random_baseline = rb->second;
    out.push_back(s);
  }
  return out;
}

std::string core_eval_bundle_dir(const std::string& flag) {
  std::string dir = flag.empty() ? base_dir_path("eval_bundle") : flag;
  if (!path_exists(dir + "/core.yaml")) {
    if (flag.empty())
      fail("the CORE eval bundle is not in %s: run `nanochat download eval-bundle` (or pass --eval-bundle DIR)",
           dir.c_str());
    fail(
        "--eval-bundle %s: no core.yaml there (a bundle directory holds core.yaml, eval_meta_data.csv, "
        "eval_data/); `nanochat download eval-bundle` fetches one",
        dir.c_str());
  }
  return dir;
}

// ---- the zip --------------------------------------------------------------------------------
namespace {
struct Zip {
  zip_t* z = nullptr;
  explicit Zip(const std::string& path) {
    int err = 0;
    z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!z) {
      zip_error_t ze;
      zip_error_init_with_code(&ze, err);
      std::string msg = zip_error_strerror(&ze);
      zip_error_fini(&ze);
      fail("%s is not a readable zip (%s); delete it and download again", path.c_str(), msg.c_str());
    }
  }
  ~Zip() {
    if (z) zip_discard(z);
  }
};
}  // namespace

void core_bundle_verify_zip(const std::string& zip_path) {
  Zip zip(zip_path);
  if (zip_name_locate(zip.z, "eval_bundle/core.yaml", 0) < 0)
    fail("%s has no eval_bundle/core.yaml: not the CORE eval bundle", zip_path.c_str());
}

// entry names become paths under the temp dir: nothing absolute, no "..", no backslashes
static bool safe_entry_name(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find('\\') != std::string::npos) return false;
  size_t at = 0;
  while (at <= name.size()) {
    size_t slash = name.find('/', at);
    std::string part = name.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part == "..") return false;
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return true;
}

static void unzip_all(const std::string& zip_path, const std::string& out_dir) {
  Zip zip(zip_path);
  zip_int64_t n = zip_get_num_entries(zip.z, 0);
  std::vector<char> buf(1 << 20);
  for (zip_int64_t i = 0; i < n; i++) {
    const char* cname = zip_get_name(zip.z, (zip_uint64_t)i, 0);
    std::string name = cname ? cname : "";
    if (!safe_entry_name(name)) fail("%s: unsafe entry name '%s'", zip_path.c_str(), name.c_str());
    std::string path = out_dir + "/" + name;
    if (name.back() == '/') {
      make_dirs(path);
      continue;
    }
    make_dirs(parent_dir(path));
    zip_file_t* zf = zip_fopen_index(zip.z, (zip_uint64_t)i, 0);
    if (!zf) fail("%s: cannot open entry %s: %s", zip_path.c_str(), name.c_str(), zip_strerror(zip.z));
    FILE* out = std::fopen(path.c_str(), "wb");
    if (!out) {
      zip_fclose(zf);
      fail("cannot write %s: %s", path.c_str(), std::strerror(errno));
    }
    zip_int64_t got;
    bool ok = true;
    while ((got = zip_fread(zf, buf.data(), buf.size())) > 0)
      if (std::fwrite(buf.data(), 1, (size_t)got, out) != (size_t)got) ok = false;
    std::string zerr = got < 0 ? zip_file_strerror(zf) : "";
    zip_fclose(zf);
    if (std::fclose(out) != 0) ok = false;
    if (got < 0)
      fail("%s: entry %s is corrupt (%s); delete the zip and download again", zip_path.c_str(), name.c_str(),
           zerr.c_str());
    if (!ok) fail("cannot write %s (disk full?)", path.c_str());
  }
}

void core_bundle_place(const std::string& zip_path, const std::string& dest) {
  if (path_exists(dest)) return;
  std::string parent = parent_dir(dest);
  make_dirs(parent);
  FileLock lock(dest + ".lock");
  if (path_exists(dest)) return;  // another rank placed it while we waited
  core_bundle_verify_zip(zip_path);
  // the temp dir sits beside dest so the final rename stays on one filesystem
  std::string tmp = dest + ".tmp." + std::to_string(getpid());
  remove_tree(tmp);
  try {
    make_dirs(tmp);
    unzip_all(zip_path, tmp);
    if (std::rename((tmp + "/eval_bundle").c_str(), dest.c_str()) != 0)
      fail("cannot move %s/eval_bundle to %s: %s", tmp.c_str(), dest.c_str(), std::strerror(errno));
    fsync_parent_dir(dest);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  remove_tree(tmp);
}

std::string core_bundle_download(const std::string& url, const DownloadOptions& opts) {
  std::string dest = base_dir_path("eval_bundle");
  if (path_exists(dest + "/core.yaml")) return dest;
  std::string zip_path = base_dir_path("eval_bundle.zip");
  DownloadOptions o = opts;
  o.verify = core_bundle_verify_zip;
  download_file(url, zip_path, o);
  core_bundle_place(zip_path, dest);
  return dest;
}

}  // namespace nanochat
