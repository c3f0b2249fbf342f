// fuzz_replay: every libFuzzer target's entry point, linked into one ordinary program that
// feeds it each file of a corpus directory, so ctest replays tests/fuzz/<target>/ in every
// CI run with the normal compiler (under ASan and LeakSanitizer in a NANOCHAT_SANITIZE
// build). A crash, an uncaught exception or an abort fails the test; each fuzz_<name>.cpp is
// compiled with its entry point renamed to fuzz_<name>_one_input (tests/CMakeLists.txt).
//
//   fuzz_replay <target> <corpus dir or file>...
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int fuzz_parquet_one_input(const uint8_t*, size_t);
extern "C" int fuzz_safetensors_one_input(const uint8_t*, size_t);
extern "C" int fuzz_torch_pickle_one_input(const uint8_t*, size_t);
extern "C" int fuzz_tokenizer_one_input(const uint8_t*, size_t);
extern "C" int fuzz_chat_request_one_input(const uint8_t*, size_t);

struct Target {
  const char* name;
  int (*one_input)(const uint8_t*, size_t);
};
static const Target kTargets[] = {
    {"parquet", fuzz_parquet_one_input},           {"safetensors", fuzz_safetensors_one_input},
    {"torch_pickle", fuzz_torch_pickle_one_input}, {"tokenizer", fuzz_tokenizer_one_input},
    {"chat_request", fuzz_chat_request_one_input},
};

static void add_inputs(const std::string& path, std::vector<std::string>& files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "fuzz_replay: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    files.push_back(path);
    return;
  }
  DIR* d = opendir(path.c_str());
  while (dirent* e = d ? readdir(d) : nullptr)
    if (e->d_name[0] != '.') files.push_back(path + "/" + e->d_name);
  if (d) closedir(d);
}

int main(int argc, char** argv) {
  const Target* target = nullptr;
  for (const Target& t : kTargets)
    if (argc > 1 && std::strcmp(argv[1], t.name) == 0) target = &t;
  if (!target || argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay parquet|safetensors|torch_pickle|tokenizer|chat_request <corpus>...\n");
    return 2;
  }
  std::vector<std::string> files;
  for (int i = 2; i < argc; i++) add_inputs(argv[i], files);
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no inputs\n");
    return 2;
  }
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "%s: %s (%zu bytes)\n", target->name, f.c_str(), bytes.size());
    target->one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_replay %s: %zu inputs, no crash\n", target->name, files.size());
  return 0;
}
