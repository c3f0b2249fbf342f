// Compiled instead of flash_window_cuda.cpp when the LibTorch found has no CUDA.
#include "flash_window.h"

#include "nanochat/common/error.h"

namespace nanochat {

bool attention_flash_window_supported(const torch::Tensor&, const torch::Tensor&) { return false; }
bool attention_flash_window_checked(const torch::Tensor&) { return false; }

torch::Tensor attention_flash_window(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, int64_t) {
  fail("attention_flash_window needs a CUDA build of nanochat (this one was built against a LibTorch without CUDA)");
}

torch::Tensor attention_flash_rows(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                   const torch::Tensor&, int64_t, int64_t) {
  fail("attention_flash_rows needs a CUDA build of nanochat (this one was built against a LibTorch without CUDA)");
}

}  // namespace nanochat
