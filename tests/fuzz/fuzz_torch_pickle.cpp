// libFuzzer target for the .pt reader (restricted unpickler). An input starting with "PK"
// is a whole torch.save archive; any other input is its data.pkl, put into an archive
// beside one storage record data/0 (two floats), as torch.save lays them out, so that the
// fuzzer spends its time on the pickle rather than on zip checksums. Every failure must be
// a nanochat::Error. See bench/fuzz.sh.
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "nanochat/checkpoint/torch_pickle.h"
#include "nanochat/common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path;
  if (size >= 2 && std::memcmp(data, "PK", 2) == 0) {
    path = fuzz_temp_dir() + "/raw.pt";
    fuzz_write_file(path, data, size);
  } else {
    path = fuzz_temp_dir() + "/wrapped.pt";
    caffe2::serialize::PyTorchStreamWriter w(path);
    float storage[2] = {1.5f, -4.0f};
    w.writeRecord("data.pkl", data, size);
    w.writeRecord("data/0", storage, sizeof storage);
    w.writeEndOfFile();
  }
  try {
    nanochat::TorchPickle p = nanochat::torch_pickle_load(path);
    p.tree.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } catch (const nanochat::Error& e) {
    fuzz_note(e.what());
  }
  try {
    nanochat::torch_pickle_load_state_dict(path);
  } catch (const nanochat::Error& e) {
    fuzz_note(e.what());
  }
  return 0;
}
