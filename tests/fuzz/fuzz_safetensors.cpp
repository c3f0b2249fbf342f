// libFuzzer target for the safetensors reader: any bytes as a .safetensors file. Every
// failure must be a nanochat::Error; a crash, another exception, a sanitizer report, a leak
// or an allocation past -rss_limit_mb is a finding. See bench/fuzz.sh.
#include <cstdint>

#include "fuzz_util.h"
#include "nanochat/checkpoint/safetensors.h"
#include "nanochat/common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzFile file(data, size, "fuzz.safetensors");
  try {
    nanochat::SafetensorsFile f = nanochat::safetensors_load(file.path);
    for (auto& [name, t] : f.tensors) (void)t.sum();  // the data is there and readable
  } catch (const nanochat::Error& e) {
    fuzz_note(e.what());
  }
  return 0;
}
