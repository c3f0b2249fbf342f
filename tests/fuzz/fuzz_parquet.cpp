// libFuzzer target for the parquet reader, at its default limits (errors.h): a file of up to
// a few KB must never make it ask for more than the fuzzer's -rss_limit_mb. Each input goes
// through the same path as a file on disk (a memfd opened by its /proc/self/fd path). Every
// failure must be a ParquetError; anything else (another exception, a crash, a sanitizer
// report, a leak, running past the memory limit) is a finding. See bench/fuzz.sh.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "nanochat/parquet.h"

using namespace nanochat;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzFile file(data, size, "fuzz.parquet");
  try {
    ParquetFile f(file.path);
    f.schema_text();
    for (int g = 0; g < f.num_row_groups() && g < 8; g++) {
      try {
        for (const auto& row : f.read_rows_json(g)) row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } catch (const ParquetError& e) {
        fuzz_note(e.what());
      }
      for (const std::string& name : f.top_level_names()) {
        try {
          f.read_column_strings(g, name);
        } catch (const ParquetError& e) {
          fuzz_note(e.what());
        }
      }
    }
  } catch (const ParquetError& e) {
    fuzz_note(e.what());
  }
  return 0;
}
