// Inference Linears on CPUs that multiply bf16 pairs (AVX512-BF16): the weight repacked once, at
// load, into pair panels, so that a product keeps each output in its own vector lane.
#pragma once
#include <torch/types.h>

namespace nanochat {

// whether this CPU (and NANOCHAT_KERNELS) runs the panel kernel: AVX512-BF16
bool kernels_panel_linear_supported();
// whether the panel kernel runs 2 or more rows on AMX tiles (Intel's tile unit, Sapphire Rapids
// on: CPUID's AMX-BF16 and Linux's leave), for widths a multiple of 32; NANOCHAT_AMX=0 keeps them
// on AVX512-BF16. set_amx turns it off or back on (tests, benches) and returns what it was.
bool kernels_panel_linear_amx();
bool kernels_panel_linear_set_amx(bool on);
// w (out, in), bf16 or int8, `in` even -> (ceil(out/16), in/2, 16, 2): for each block of 16
// outputs and each input pair, the 16 outputs' two weights side by side (missing outputs zero)
torch::Tensor kernels_pack_pair_panels(const torch::Tensor& w);
// the inverse: panels -> (out, in)
torch::Tensor kernels_unpack_pair_panels(const torch::Tensor& panels, int64_t out);
// x (..., in) times w^T, w given as its panels (and for int8 panels the scale (out,) per output):
// (..., out) in x's dtype; relu_square: relu(that)^2 (the MLP's c_fc). bf16 rows, any number of
// them, run our kernel (fp32 sums of bf16 pairs, relu^2 in fp32, rounded to bf16 once at the
// end); anything else (fp32 rows, kernels off) the reference.
torch::Tensor kernels_panel_linear(const torch::Tensor& x, const torch::Tensor& panels, const torch::Tensor& scale,
                                   int64_t out, bool relu_square = false);
// at::linear of the unpacked weight (times the scale), relu^2 if asked: the tests' second opinion
torch::Tensor kernels_panel_linear_reference(const torch::Tensor& x, const torch::Tensor& panels,
                                             const torch::Tensor& scale, int64_t out, bool relu_square = false);

}  // namespace nanochat
