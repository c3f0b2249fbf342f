// The self-check: before the fused ops run on a device in a dtype, each op runs once,
// forward and backward, on small seeded random inputs through its kernel and through its ATen
// reference, and the two must agree within the dtype's tolerance. An op that does not is logged
// as one error line and runs its reference for the rest of the process (NANOCHAT_KERNELS=strict:
// the run stops instead). A GPU whose kernels miscompute then costs speed, not a training run.
// The inputs are drawn on the device from a private generator (kernels_check_generator): the run's
// own random streams are left as they were; the errors are reduced there, one scalar read back.
// The checks run with fp32 matmuls at full precision ("highest", not the TF32 that training sets
// on CUDA): an fp32 reference in TF32 is ~1e-3 off, ten times the fp32 tolerance, and would fail
// correct kernels. The caller's setting is restored after. Under more than one rank the verdicts
// are agreed (kernels_set_agreement): an op runs its kernel on every rank or on none; the checks
// then run at start only (kernels_check_at_start), where every rank is at the same point of
// its collectives: a check run later, by the first rank to meet a dtype, would pair its
// agreement with another rank's next collective (a hang on NCCL, a mismatch on Gloo).
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <torch/types.h>

#include "op_dispatch.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/kernels.h"

namespace nanochat {
namespace {

std::vector<kernels_check_entry>& registry() {
  static std::vector<kernels_check_entry> entries;  // filled before main, read after
  return entries;
}

// the largest disagreement of two runs, each tensor's relative to its reference's largest
// magnitude; +inf when the runs disagree in shape or count, NaN when a value is NaN. Reduced on
// the runs' device (fp64 for fp64 runs, fp32 otherwise: the error of the subtraction is far under
// any tolerance), one scalar read back.
double max_error(const std::vector<torch::Tensor>& fused, const std::vector<torch::Tensor>& ref) {
  if (fused.size() != ref.size()) return INFINITY;
  std::vector<torch::Tensor> errors;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!fused[i].defined() && !ref[i].defined()) continue;
    if (!fused[i].defined() || !ref[i].defined() || !fused[i].sizes().equals(ref[i].sizes())) return INFINITY;
    if (ref[i].numel() == 0) continue;
    const auto acc = ref[i].scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const torch::Tensor f = fused[i].detach().to(ref[i].device(), acc), r = ref[i].detach().to(acc);
    // max propagates NaN: a NaN anywhere is the result
    errors.push_back(((f - r).abs().max() / r.abs().max().clamp_min(1e-12)).to(at::kDouble));
  }
  if (errors.empty()) return 0;
  return at::stack(errors).max().item<double>();
}

// runs `run` and waits for the device, in milliseconds
template <typename F>
double timed_ms(at::Device device, F&& run) {
  const auto t0 = std::chrono::steady_clock::now();
  run();
  device_synchronize(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

kernels_check_result check_one_untimed(const kernels_check_entry& e, at::Device device, at::ScalarType dtype) {
  kernels_check_result r{e.op,
                         device.str(),
                         dtype_name(dtype),
                         true,
                         false,
                         0,
                         e.tolerance ? e.tolerance(device, dtype) : kernels_check_tolerance(dtype),
                         0,
                         0,
                         "",
                         0,
                         e.part_of ? e.part_of : ""};
  // no kernels to check: a CPU without AVX2+FMA+F16C, a build without the CUDA kernels (but for
  // an op whose CUDA path is ATen alone)
  if ((device.is_cpu() && !kernels_cpu_supported()) ||
      (device.is_cuda() && !kernels_cuda_built() && !e.cuda_without_nvcc))
    return r;
  std::vector<torch::Tensor> fused, ref;
  try {
    r.reference_ms = timed_ms(device, [&] { ref = e.run(device, dtype, false); });
    if (ref.empty()) return r;  // no kernel of this op for this device and dtype
    r.applies = true;
    r.fused_ms = timed_ms(device, [&] { fused = e.run(device, dtype, true); });
    r.max_error = max_error(fused, ref);
    r.ok = r.max_error <= r.tolerance;  // false for NaN
  } catch (const std::exception& ex) {  // a kernel that throws fails its check, with the reason
    r.applies = true;
    r.ok = false;
    r.max_error = INFINITY;
    r.detail = ex.what();
    const size_t eol = r.detail.find('\n');  // LibTorch's messages carry a backtrace
    if (eol != std::string::npos) r.detail.resize(eol);
  }
  return r;
}

kernels_check_result check_one(const kernels_check_entry& e, at::Device device, at::ScalarType dtype) {
  const auto t0 = std::chrono::steady_clock::now();
  kernels_check_result r = check_one_untimed(e, device, dtype);
  r.check_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// fp32 matmuls at "highest" for the guard's life, the caller's precision restored after
class Fp32MatmulHighest {
 public:
  Fp32MatmulHighest() : saved_(at::globalContext().float32MatmulPrecision()) {
    at::globalContext().setFloat32MatmulPrecision("highest");
  }
  ~Fp32MatmulHighest() { at::globalContext().setFloat32MatmulPrecision(name(saved_)); }
  Fp32MatmulHighest(const Fp32MatmulHighest&) = delete;
  Fp32MatmulHighest& operator=(const Fp32MatmulHighest&) = delete;

 private:
  static const char* name(at::Float32MatmulPrecision p) {
    switch (p) {
      case at::Float32MatmulPrecision::HIGH: return "high";
      case at::Float32MatmulPrecision::MEDIUM: return "medium";
      default: return "highest";
    }
  }
  at::Float32MatmulPrecision saved_;
};

std::mutex check_mutex;
std::atomic<bool> checks_running{false};               // run_checks is running, on the thread holding check_mutex
std::function<void(std::vector<int64_t>&)> agreement;  // MIN of the ok flags across ranks, or empty
std::map<std::string, bool> verdicts;                  // "op|device|dtype" -> passed
std::map<std::string, bool> checked;                   // "device|dtype" -> every op checked there
std::set<std::string> unchecked_warned;                // "device|dtype" met after the start, named once
bool started = false;                                  // kernels_check_at_start ran
thread_local bool in_check = false;                    // the checks' own calls of the ops run their kernels

// sets the check's flags for its life and clears them however it ends (an op's tolerance or a
// log line may throw): a flag left set would put every other thread on the references and
// force the kernels on under NANOCHAT_KERNELS=0 on this one
class CheckFlags {
 public:
  CheckFlags() {
    in_check = true;
    checks_running = true;
  }
  ~CheckFlags() {
    checks_running = false;
    in_check = false;
  }
  CheckFlags(const CheckFlags&) = delete;
  CheckFlags& operator=(const CheckFlags&) = delete;
};

std::string key(const std::string& a, const std::string& b) { return a + "|" + b; }

const char* const kOtherRank = "failed on another rank";

// runs every op's check on device in dtype and records the verdicts (agreed across ranks when
// there is more than one); check_mutex held. announce: one line naming each op before it runs,
// so that a kernel that kills the process (a CUDA context lost) is named in the log.
std::vector<kernels_check_result> run_checks(at::Device device, at::ScalarType dtype, bool announce) {
  std::vector<kernels_check_result> results;
  {
    // small tensors built and differentiated here, whatever the caller's modes
    c10::InferenceMode not_inference(false);
    torch::AutoGradMode grad_on(true);
    Fp32MatmulHighest full_precision;
    CheckFlags flags;
    for (const kernels_check_entry& e : registry()) {
      if (announce)
        log_info("kernel self-check: %s on %s in %s...", e.op, device.str().c_str(), dtype_name(dtype).c_str());
      results.push_back(check_one(e, device, dtype));  // catches what the op throws
    }
  }
  if (agreement) {  // every rank runs the same path: an op passes only where it passed on all ranks
    std::vector<int64_t> ok;
    for (const kernels_check_result& r : results) ok.push_back(r.ok ? 1 : 0);
    agreement(ok);
    for (size_t i = 0; i < results.size(); i++)
      if (results[i].ok && ok.at(i) == 0) {
        results[i].ok = false;
        results[i].detail = kOtherRank;
      }
  }
  for (const kernels_check_result& r : results) {
    verdicts[key(r.op, key(r.device, r.dtype))] = r.ok;
    if (r.ok) continue;
    const std::string what =
        r.detail == kOtherRank
            ? strprintf("kernel self-check: %s in %s passed on %s but %s", r.op.c_str(), r.dtype.c_str(),
                        r.device.c_str(), kOtherRank)
            : strprintf(
                  "kernel self-check: %s on %s in %s disagrees with its ATen reference (max error %.3g, "
                  "tolerance %.3g)%s%s",
                  r.op.c_str(), r.device.c_str(), r.dtype.c_str(), r.max_error, r.tolerance,
                  r.detail.empty() ? "" : ": ", r.detail.c_str());
    if (kernels_strict()) fail("%s (NANOCHAT_KERNELS=strict)", what.c_str());
    log_error("%s; it runs its reference for the rest of this run", what.c_str());
  }
  checked[key(device.str(), dtype_name(dtype))] = true;
  return results;
}

}  // namespace

// bf16 keeps 8 bits of mantissa (one rounding is 0.4%), fp16 11; the kernels round where the
// eager ops round, except that they keep fp32 in between, so a few roundings apart at most
double kernels_check_tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return 1e-9;
    case at::kFloat: return 1e-4;
    case at::kHalf: return 1e-2;
    default: return 5e-2;  // bfloat16
  }
}

at::Generator kernels_check_generator(at::Device device, uint64_t seed) {
  at::Generator gen;
  {
    at::Generator parent = at::globalContext().defaultGenerator(device);  // a handle, shared
    std::lock_guard<std::mutex> lock(parent.mutex());
    gen = parent.clone();
  }
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  return gen;
}

bool kernels_register_check(kernels_check_entry entry) {
  registry().push_back(entry);
  return true;
}

bool kernels_check_passed(const char* op, at::Device device, at::ScalarType dtype) {
  if (in_check) return true;  // the check's own calls run the kernels, NANOCHAT_KERNELS=0 or not
  if (!kernels_enabled()) return false;
  // Another thread is running the checks: this call runs the reference rather than wait. The
  // caller may be a thread the check itself waits on (on a GPU, autograd runs a backward on its
  // device thread, where in_check is unset), and waiting would deadlock both; for any other
  // thread the reference is right too, only slower, until the verdicts are in.
  std::unique_lock<std::mutex> lock(check_mutex, std::try_to_lock);
  if (!lock.owns_lock()) {
    if (checks_running) return false;
    lock.lock();  // held for a verdict's lookup: a moment
  }
  const std::string where = key(device.str(), dtype_name(dtype));
  if (!checked.count(where)) {
    if (started && agreement) {  // under several ranks no check runs here: it would be a collective
      if (unchecked_warned.insert(where).second)
        log_error(
            "kernel self-check: %s met %s on %s, which the checks at start did not cover: it and every "
            "other fused op run their references there (under several ranks a check runs at start only)",
            op, dtype_name(dtype).c_str(), device.str().c_str());
      return false;
    }
    run_checks(device, dtype, false);
  }
  auto it = verdicts.find(key(op, where));
  return it == verdicts.end() || it->second;
}

std::vector<kernels_check_result> kernels_self_check(at::Device device, at::ScalarType dtype, bool announce) {
  std::lock_guard<std::mutex> lock(check_mutex);
  return run_checks(device, dtype, announce);
}

std::vector<kernels_check_result> kernels_check_at_start(at::Device device, const std::vector<at::ScalarType>& dtypes,
                                                         bool announce) {
  std::vector<kernels_check_result> table;
  if (!kernels_enabled()) return table;  // the references everywhere: nothing to check or agree
  std::lock_guard<std::mutex> lock(check_mutex);
  for (at::ScalarType dtype : dtypes) {
    if (checked.count(key(device.str(), dtype_name(dtype)))) continue;  // a dtype listed twice
    std::vector<kernels_check_result> rows = run_checks(device, dtype, announce);
    table.insert(table.end(), rows.begin(), rows.end());
  }
  started = true;
  return table;
}

bool kernels_self_check_running() { return in_check || checks_running; }

void kernels_set_agreement(std::function<void(std::vector<int64_t>&)> all_reduce_min) {
  std::lock_guard<std::mutex> lock(check_mutex);
  agreement = std::move(all_reduce_min);
}

}  // namespace nanochat
