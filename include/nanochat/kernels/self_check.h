// The self-check of the fused ops (src/kernels/self_check.cpp): each op, forward and backward,
// through its kernel and through its ATen reference on small random inputs; an op that
// disagrees runs its reference from then on. Ops register here, in the kernels module and
// beyond it (the attention module's real window).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>

#include "nanochat/common/tensor.h"

namespace nanochat {

struct kernels_check_result {
  std::string op, device, dtype;
  bool ok;                      // agreed within the tolerance (or has no kernel there)
  bool applies;                 // the op has a kernel for this device and dtype
  double max_error, tolerance;  // max |kernel - reference| / max |reference| over its outputs and gradients
  double fused_ms, reference_ms;
  std::string detail;   // why, when the kernel threw
  double check_ms = 0;  // the whole check of this op: both runs, the error's reduction and read-back
  std::string part_of;  // the op this check is part of, when it is not an op itself (fp8_quantize)
};
// Runs every op's check on device in dtype now (again) and returns the table (nanochat doctor
// --kernels). announce: log each op's name before its check runs. The checks run with fp32
// matmuls at "highest" and leave the caller's setting as it was. Under more than one rank a
// collective: every rank calls it at the same point.
std::vector<kernels_check_result> kernels_self_check(at::Device device, at::ScalarType dtype, bool announce = false);

// Under more than one rank (compute_init sets it; empty clears it): called with each op's ok flag
// (1/0) after every self-check, in the registry's order, it replaces them with their MIN across the
// ranks, so that every rank runs the same path.
void kernels_set_agreement(std::function<void(std::vector<int64_t>&)> all_reduce_min);

// The checks at start, on every rank right after the process group is up and before any other
// collective (compute_init): device in each of dtypes, verdicts agreed. From then on, under an
// agreement, no check runs by itself: a first use of another (device, dtype) is one error line
// naming the op and dtype, and that use runs the reference, with no collective. With one process
// a first use still runs the checks of its (device, dtype) there. Nothing runs under
// NANOCHAT_KERNELS=0. Returns the checks' table, each dtype once.
std::vector<kernels_check_result> kernels_check_at_start(at::Device device, const std::vector<at::ScalarType>& dtypes,
                                                         bool announce = false);

// One op's self-check: `run` runs the op forward and backward on small seeded random inputs on
// `device` in `dtype`, through its fused kernel (fused = true) or its reference, and returns the
// tensors to compare (outputs, then gradients or updated state) -- empty where the op has no
// kernel for that device and dtype. Each op's file registers one at static initialisation.
struct kernels_check_entry {
  const char* op;
  std::vector<torch::Tensor> (*run)(at::Device device, at::ScalarType dtype, bool fused);
  // the op's own tolerance where the dtype's does not hold (null: the dtype's; self_check.cpp)
  double (*tolerance)(at::Device device, at::ScalarType dtype) = nullptr;
  // the op's CUDA path is ATen alone (fp8_linear's _scaled_mm): it runs, and is checked, in a
  // build without the CUDA kernels too
  bool cuda_without_nvcc = false;
  // a second check of an op's file (fp8_linear's quantisation) or of a module that owns an op
  // (attention's flash window): the op it belongs to; null for the op's own check
  const char* part_of = nullptr;
};
bool kernels_register_check(kernels_check_entry entry);
// the generator a check draws its inputs from: on the check's device (no host draws and copies
// at d24's shapes), seeded, private (the run's own random streams are left as they were)
at::Generator kernels_check_generator(at::Device device, uint64_t seed);
// the tolerance of the self-check in a dtype (docs/kernels.md says why each holds)
double kernels_check_tolerance(at::ScalarType dtype);
// whether `op` runs its kernel on device in dtype: kernels on and its self-check passed there
// (with one process, running every op's check on the first call for that (device, dtype)); true
// for an op without a check there, and inside a check (which compares the kernels even under
// NANOCHAT_KERNELS=0); false, without waiting, while another thread runs the checks
bool kernels_check_passed(const char* op, at::Device device, at::ScalarType dtype);
// true while a self-check runs (on any thread): its flags, which scope guards clear however
// the check ends
bool kernels_self_check_running();

}  // namespace nanochat
