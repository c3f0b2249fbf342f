// bench_checkpoint [MB=512] [DIR=/tmp]: safetensors save/load of a model-shaped set of
// tensors against a plain write+fsync / read of the same number of bytes, in the same run.
// Reads come from the page cache for both (the file was just written), so the ratio shows
// the format's overhead, not the disk.

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "nanochat/checkpoint/safetensors.h"
#include "nanochat/common/files.h"

using namespace nanochat;

static double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename F>
static double best_of(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

int main(int argc, char** argv) {
  int64_t mb = argc > 1 ? std::atoll(argv[1]) : 512;
  std::string dir = (argc > 2 ? argv[2] : "/tmp") + std::string("/bench_checkpoint_") + std::to_string(getpid());
  make_dirs(dir);

  // a GPT-like mix: a few big matrices (bf16 embeddings, fp32 weights) and many small vectors
  NamedTensors tensors;
  int64_t bytes = 0, target = mb << 20;
  for (int i = 0; bytes < target; i++) {
    torch::Tensor t = i % 4 == 0 ? torch::randn({1024, 2048}).to(torch::kBFloat16) : torch::randn({512, 1024});
    bytes += t.nbytes();
    tensors.emplace_back("h." + std::to_string(i) + ".weight", t);
    tensors.emplace_back("h." + std::to_string(i) + ".lambda", torch::ones({16}));
    bytes += 64;
  }
  std::vector<char> flat(bytes, 1);

  std::string st = dir + "/model.safetensors", raw = dir + "/raw.bin";
  double t_save = best_of(3, [&] { safetensors_save(st, tensors, {{"format", "pt"}}); });
  double t_write = best_of(3, [&] {
    int fd = open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int64_t off = 0; off < bytes;) off += write(fd, flat.data() + off, std::min<int64_t>(bytes - off, 1 << 30));
    fsync(fd);
    close(fd);
  });
  double t_load = best_of(3, [&] { safetensors_load(st); });
  double t_read = best_of(3, [&] {
    std::unique_ptr<char[]> buf(new char[bytes]);  // fresh, uninitialised memory, as the load gets
    int fd = open(raw.c_str(), O_RDONLY);
    for (int64_t off = 0; off < bytes;) {
      ssize_t got = read(fd, buf.get() + off, bytes - off);
      if (got <= 0) break;
      off += got;
    }
    close(fd);
  });
  remove_tree(dir);

  double gb = bytes / 1e9;
  std::printf("%zu tensors, %.1f MB, best of 3\n", tensors.size(), bytes / 1e6);
  std::printf("%-28s %8s %8s\n", "", "GB/s", "ratio");
  std::printf("%-28s %8.2f %8.2f\n", "safetensors_save (fsync)", gb / t_save, t_write / t_save);
  std::printf("%-28s %8.2f %8s\n", "plain write+fsync", gb / t_write, "1.00");
  std::printf("%-28s %8.2f %8.2f\n", "safetensors_load", gb / t_load, t_read / t_load);
  std::printf("%-28s %8.2f %8s\n", "plain read (page cache)", gb / t_read, "1.00");
  return 0;
}
