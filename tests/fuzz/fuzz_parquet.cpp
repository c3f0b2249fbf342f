// libFuzzer target for the parquet reader. Each input goes through the same path as a file
// on disk: it is written to an anonymous memfd and opened by its /proc/self/fd path. Every
// failure must be a ParquetError; anything else (another exception, a crash, a sanitizer
// report, a leak, running out of the memory limit) is a finding. See tests/fuzz/build.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "nanochat/parquet.h"
#include "parquet/errors.h"

using namespace nanochat;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // small caps so a hostile size field can't take the fuzzer's memory budget; real files
  // use the defaults in parquet/errors.h
  ParquetLimits& lim = parquet_limits();
  lim.max_page_bytes = 16 << 20;
  lim.max_page_values = 1 << 20;
  lim.max_chunk_values = 4 << 20;
  lim.max_chunk_output_bytes = 64 << 20;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("fuzz.parquet", 0);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += (size_t)n;
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    ParquetFile f(path);
    f.schema_text();
    for (int g = 0; g < f.num_row_groups() && g < 8; g++) {
      try {
        for (const auto& row : f.read_rows_json(g)) row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } catch (const ParquetError&) {
      }
      for (const std::string& name : f.top_level_names()) {
        try {
          f.read_column_strings(g, name);
        } catch (const ParquetError&) {
        }
      }
    }
  } catch (const ParquetError&) {
  }
  close(fd);
  return 0;
}
