// How an op of the kernels module picks its path: the one rule that picks its fused kernel or
// its reference, the build switch, the fault switch for drills, the capability queries, the
// d24 shapes of the self-check's inputs and the CPU helpers the tests reach (the self-check's
// registry is public: nanochat/kernels/self_check.h).
//
// An op is three files: <op>.cpp (the public function, its autograd function, its ATen
// `_reference`, the dispatch and the self-check's inputs), <op>_cpu.cpp (the CPU kernel,
// compiled for AVX2+FMA+F16C) and <op>.cu (the CUDA kernel, its launch and the checks of the
// tensors it is handed; compiled when nvcc is found). <op>.cpp declares the kernels it calls.
#pragma once
#include <vector>

#include "nanochat/common/tensor.h"
#include "nanochat/kernels/self_check.h"

// An op's CUDA kernel where its tensor is on a GPU and this build has the CUDA kernels, else its
// CPU kernel: the one place an op file's forward and backward branch on the build. Without nvcc
// the CUDA call is never compiled, so the op files declare their CUDA functions unconditionally.
#ifdef NANOCHAT_CUDA_KERNELS
#define KERNELS_CUDA_OR_CPU(on_cuda, cuda_call, cpu_call) ((on_cuda) ? (cuda_call) : (cpu_call))
#else
#define KERNELS_CUDA_OR_CPU(on_cuda, cuda_call, cpu_call) (cpu_call)
#endif

namespace nanochat {

// The one fallback rule: true when `op` runs its fused kernel for x. That is when kernels are
// on (NANOCHAT_KERNELS is not 0), x's device has the op's kernels in this build (a CPU with
// AVX2+FMA+F16C; a CUDA device when the .cu files were built) for x's dtype (fp32, bf16, fp16;
// fp64 on the CPU, for gradient checks), and the op passed its self-check on that device and
// dtype (checked at start by compute_init, or by the first call for a (device, dtype) in one process).
// Otherwise the op runs its own `_reference`, which is also what the check compares against.
bool kernels_use_fused(const char* op, const torch::Tensor& x);
// the same, with the verdict of the dtype the op computes in where that is not x's (Muon: fp32
// params and gradients, its X and Polar Express in bf16)
bool kernels_use_fused(const char* op, const torch::Tensor& x, at::ScalarType checked_dtype);
// the same for an op whose CUDA path is ATen alone (kernels_check_entry::cuda_without_nvcc): on a
// GPU it needs no CUDA kernels in the build
bool kernels_use_fused_aten_on_cuda(const char* op, const torch::Tensor& x);

// NANOCHAT_KERNELS_FAULT=<op> (drills and tests, never by default): the op's fused output comes
// back perturbed, far past any tolerance, so that the self-check has something to catch;
// NANOCHAT_KERNELS_FAULT_RANK=<r> too: on that rank alone.
torch::Tensor kernels_fault(const char* op, const torch::Tensor& out);
// the same for the ops that update tensors in place (AdamW, Muon): t is perturbed in place
void kernels_fault_(const char* op, torch::Tensor& t);

// NANOCHAT_KERNELS=strict: a failed self-check stops the run instead of falling back
bool kernels_strict();

// The self-check's second shape of each op is one of the d24 speedrun's, so that the check
// reaches the paths of the real widths (the CUDA kernels' multi-warp reductions and tiles, a
// vocab of 32768): on a GPU, where it costs milliseconds; the CPU, whose kernels have no such
// paths and which runs the check in every test process, keeps the small shapes (but for the
// vocab of 32768, on 4 rows).
namespace d24 {
constexpr int64_t n_embd = 1536, n_head = 12, head_dim = 128, mlp_hidden = 4 * n_embd, vocab = 32768, seq_len = 2048;
}
inline bool kernels_check_real_shapes(at::Device device) { return device.is_cuda(); }

// the CPU kernels are compiled for AVX2+FMA+F16C: true when this CPU has them
bool kernels_cpu_supported();
// whether this build has the CUDA kernels (nvcc was found when it was configured)
bool kernels_cuda_built();

// cpu_helpers.cpp: float32 -> bfloat16 or back (x contiguous) through the CPU kernels' row
// conversions, for tests: the bits of x.to() (round to nearest even; a NaN stays a NaN)
torch::Tensor cast_float_bfloat16_cpu(const torch::Tensor& x);
// how many threads an at::parallel_for in the CPU kernels' files really runs on (1 when a
// build drops -fopenmp: its pragma then compiles to nothing)
int cpu_kernel_threads();

}  // namespace nanochat
