// defines: softcap_ce_forward_cuda, softcap_ce_backward_cuda, relu_square_forward_cuda,
//          relu_square_backward_cuda, rotary_norm_cuda_takes, rotary_norm_forward_cuda,
//          rotary_norm_backward_cuda, residual_norm_forward_cuda, residual_norm_backward_cuda,
//          adamw_step_cuda, muon_nesterov_cuda, muon_scale_rows_cuda, muon_sumsq_cuda,
//          muon_update_cuda
// Compiled instead of kernels_cuda.cpp when the LibTorch found has no CUDA: a CUDA tensor
// cannot exist in such a build, so reaching one of these is a build mismatch, said plainly.
#include "device_kernels.h"

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

[[noreturn]] void fail_no_cuda(const char* what) {
  fail("%s needs a CUDA build of nanochat (this one was built against a LibTorch without CUDA)", what);
}

}  // namespace

void softcap_ce_forward_cuda(const torch::Tensor&, const torch::Tensor&, int64_t, double, torch::Tensor&,
                             torch::Tensor&) {
  fail_no_cuda("softcap_ce_forward_cuda");
}
void softcap_ce_backward_cuda(torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                              int64_t, double) {
  fail_no_cuda("softcap_ce_backward_cuda");
}
torch::Tensor relu_square_forward_cuda(const torch::Tensor&) { fail_no_cuda("relu_square_forward_cuda"); }
void relu_square_backward_cuda(const torch::Tensor&, torch::Tensor&) { fail_no_cuda("relu_square_backward_cuda"); }
bool rotary_norm_cuda_takes(int64_t) { return false; }
std::pair<torch::Tensor, torch::Tensor> rotary_norm_forward_cuda(const torch::Tensor&, const torch::Tensor&,
                                                                 const torch::Tensor&, int64_t, int64_t, double,
                                                                 double) {
  fail_no_cuda("rotary_norm_forward_cuda");
}
torch::Tensor rotary_norm_backward_cuda(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                        const torch::Tensor&, const torch::Tensor&, int64_t, int64_t, double) {
  fail_no_cuda("rotary_norm_backward_cuda");
}
ResidualNormOut residual_norm_forward_cuda(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                           const torch::Tensor&, double) {
  fail_no_cuda("residual_norm_forward_cuda");
}
ResidualNormGrads residual_norm_backward_cuda(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                              const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                              const torch::Tensor&, const torch::Tensor&) {
  fail_no_cuda("residual_norm_backward_cuda");
}

void adamw_step_cuda(torch::Tensor&, const torch::Tensor&, torch::Tensor&, torch::Tensor&, float, float, float, float,
                     float, float, float) {
  fail_no_cuda("adamw_step_cuda");
}

void muon_nesterov_cuda(const torch::Tensor&, torch::Tensor&, torch::Tensor&, torch::Tensor&, double) {
  fail_no_cuda("muon_nesterov_cuda");
}
void muon_scale_rows_cuda(torch::Tensor&, const torch::Tensor&) { fail_no_cuda("muon_scale_rows_cuda"); }
void muon_sumsq_cuda(const torch::Tensor&, bool, torch::Tensor&) { fail_no_cuda("muon_sumsq_cuda"); }
void muon_update_cuda(const torch::Tensor&, torch::Tensor&, const torch::Tensor&, bool, double, double) {
  fail_no_cuda("muon_update_cuda");
}

}  // namespace nanochat
