// `nanochat doctor`: what to run when something is off. Versions, devices, memory, the base
// dir and its free disk, under more than one rank a self-test of every collective, and with
// --kernels the fused kernels checked against their references on this rank's device.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli/commands.h"
#include "nanochat/kernels/int8_linear.h"
#include "nanochat/common.h"
#include "nanochat/common/device_driver.h"
#include "nanochat/compute.h"
#include "nanochat/kernels.h"

namespace nanochat {

static std::string gib_or_unknown(int64_t bytes) {
  return bytes < 0 ? std::string("unknown") : strprintf("%.1f GiB", bytes / double(1ull << 30));
}

// the kernel self-check on this rank's device, in the run's compute dtype and in fp32 (the
// optimizer's), as a table; returns the rows (the JSON line is printed by the caller, last)
static std::vector<kernels_check_result> doctor_kernel_table(const Compute& c) {
  // compute_init checked the compute dtype and fp32 (naming each op before its check: a kernel
  // that kills the process is named); under NANOCHAT_KERNELS=0 it checked nothing: check now
  std::vector<kernels_check_result> rows = c.kernel_checks;
  if (rows.empty()) {
    rows = kernels_self_check(c.device, c.dtype, /*announce=*/true);
    if (c.dtype != torch::kFloat32) {
      auto r = kernels_self_check(c.device, torch::kFloat32, /*announce=*/true);
      rows.insert(rows.end(), r.begin(), r.end());
    }
  }
  log_info("kernel self-check on %s (each op forward and backward, kernel against its ATen reference):",
           c.device.str().c_str());
  log_info("  %-18s %-8s %-9s %11s %10s %10s %10s %10s  %s", "op", "device", "dtype", "max error", "tolerance",
           "kernel ms", "ref ms", "check ms", "result");
  for (const kernels_check_result& r : rows) {
    if (!r.applies) {
      log_info("  %-18s %-8s %-9s %11s %10s %10s %10s %10.2f  no kernel here (runs its reference)", r.op.c_str(),
               r.device.c_str(), r.dtype.c_str(), "-", "-", "-", "-", r.check_ms);
      continue;
    }
    log_info("  %-18s %-8s %-9s %11.3g %10.3g %10.2f %10.2f %10.2f  %s%s%s", r.op.c_str(), r.device.c_str(),
             r.dtype.c_str(), r.max_error, r.tolerance, r.fused_ms, r.reference_ms, r.check_ms, r.ok ? "ok" : "FAILED",
             r.detail.empty() ? "" : ": ", r.detail.c_str());
  }
  return rows;
}

static nlohmann::json kernels_json(const std::vector<kernels_check_result>& rows) {
  nlohmann::json list = nlohmann::json::array();
  for (const kernels_check_result& r : rows) {
    nlohmann::json j = {{"op", r.op}, {"device", r.device},   {"dtype", r.dtype},
                        {"ok", r.ok}, {"applies", r.applies}, {"check_ms", r.check_ms}};
    if (!r.part_of.empty()) j["part_of"] = r.part_of;
    if (r.applies) {
      j["max_error"] = std::isfinite(r.max_error) ? nlohmann::json(r.max_error) : nlohmann::json(nullptr);
      j["tolerance"] = r.tolerance;
      j["fused_ms"] = r.fused_ms;
      j["reference_ms"] = r.reference_ms;
    }
    if (!r.detail.empty()) j["detail"] = r.detail;
    list.push_back(j);
  }
  return {{"kernels", list}};
}

// doctor --kernels: the table, every rank's verdict, the JSON line last; the exit code
static int doctor_kernels(const Compute& c) {
  auto rows = doctor_kernel_table(c);
  // every rank checked its own device and the verdicts are agreed (compute_init): an op that
  // failed on any rank is failed in every rank's rows
  int failed = 0;
  for (const kernels_check_result& r : rows) failed += r.ok ? 0 : 1;
  if (failed > 0)
    log_error("kernel self-check: %d op(s) disagree with their references (see the table%s)", failed,
              c.env.world_size > 1 ? "s of every rank" : "");
  if (c.master()) std::printf("%s\n", kernels_json(rows).dump().c_str());
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

// under more than one rank: every collective on known values, then timed; fails (an Error)
// when any rank saw a check fail. The failure count is summed on the group's device: NCCL
// takes CUDA tensors only.
static void doctor_collectives(Compute& c, double mb) {
  if (c.env.world_size == 1) {
    log_info("collective self-test: skipped with one rank (run `nanochat launch --nproc-per-node 2 -- doctor`)");
    return;
  }
  auto results = dist_self_test(*c.dist, (int64_t)(mb * 1e6));
  int64_t failed = 0;
  for (auto& r : results) {
    if (!r.ok) {
      failed++;
      log_warn("collective %s FAILED on rank %d: %s", r.name.c_str(), c.env.rank, r.detail.c_str());
    } else if (r.seconds > 0) {
      log_info("  %-20s ok  %8.1f MB  %9.3f ms  bus %7.2f GB/s", r.name.c_str(), r.bytes / 1e6, r.seconds * 1e3,
               r.bus_gb_per_s);
    } else {
      log_info("  %-20s ok", r.name.c_str());
    }
  }
  torch::Tensor total_failed = torch::tensor({failed}, torch::kLong).to(c.dist->device());
  c.dist->all_reduce(total_failed, ReduceOp::SUM);
  const int64_t all = total_failed.item<int64_t>();
  if (all > 0)
    fail("collective self-test: %lld check(s) failed across %d ranks (see warnings above)", (long long)all,
         c.env.world_size);
  log_info("collective self-test: all %zu collectives passed on all %d ranks", results.size(), c.env.world_size);
}

// one small op on the GPU against the CPU: a driver or runtime that cannot run a kernel fails
// here in seconds, with its own error, before anything long starts
static void doctor_device_op(const torch::Device& device) {
  torch::Tensor a = torch::arange(64 * 64, torch::kFloat32).reshape({64, 64}).remainder(17) / 16;
  const double error = (torch::mm(a.to(device), a.to(device)).cpu() - torch::mm(a, a)).abs().max().item<double>();
  // TF32 ("high") keeps 10 mantissa bits of inputs <= 1 summed over 64 terms: within 64 * 2^-10
  if (!(error <= 64.0 / 1024))
    fail("%s: a 64x64 matmul differs from the CPU's by %g: this GPU's results cannot be trusted", device.str().c_str(),
         error);
  log_info("CUDA op: a 64x64 matmul on %s agrees with the CPU (max error %.3g)", device.str().c_str(), error);
}

static int doctor_run(std::string device_flag, double mb, bool check_kernels) {
  // doctor is what to run when the GPU is not used: it says why and goes on on the CPU, where
  // training, eval and serving stop with the same line
  const std::string unusable = device_flag.empty() ? gpu_unusable_reason() : "";
  if (!unusable.empty()) device_flag = "cpu";
  Compute c = compute_init(device_flag, /*announce_checks=*/check_kernels);  // a kernel that kills the process is named
  std::istringstream version(cli_version_text());
  for (std::string line; std::getline(version, line);) log_info("%s", line.c_str());
  // the driver next to the CUDA the wheel needs: the first thing to compare when the GPU is idle
  std::string driver = nvidia_driver_version(), wheel = libtorch_cuda_version();
  if (driver.empty()) driver = "none";
  else if (const int runs = cuda_major_for_driver(driver)) driver += strprintf(" (runs CUDA %d.x at most)", runs);
  else driver += " (too old for any CUDA build of torch)";
  log_info("NVIDIA driver: %s; LibTorch's CUDA: %s", driver.c_str(),
           wheel.empty() ? "none (a CPU build)" : wheel.c_str());
  if (!unusable.empty()) log_warn("the GPU is not used: %s", unusable.c_str());
  HostInfo host = host_info();
  log_info("CPU: %s, %d hardware threads, %d used by this rank", host.cpu_model.c_str(), host.hardware_threads,
           c.cpu_threads);
  log_info("inference dtypes: %s", kernels_int8_cpu_report().c_str());
  log_info("memory: %s total, %s available", gib_or_unknown(host.memory_total_bytes).c_str(),
           gib_or_unknown(host.memory_available_bytes).c_str());
  // a rank on a GPU asks for its own alone: the memory query creates that GPU's CUDA context
  // (eight ranks listing eight GPUs would hold 64 of them); on the CPU, one process lists them all
  if (c.device.is_cuda() || c.env.world_size == 1)
    for (auto& g : cuda_device_infos(c.device.is_cuda() ? c.device.index() : -1))
      log_info("cuda:%d %s: %d SMs, %s total, %s free", g.index, g.name.c_str(), g.multiprocessors,
               gib_or_unknown(g.total_bytes).c_str(), gib_or_unknown(g.free_bytes).c_str());
  log_info("device: %s, compute dtype %s", c.device.str().c_str(), dtype_name(c.dtype).c_str());
  if (c.device.is_cuda()) doctor_device_op(c.device);
  std::string dir = base_dir();
  log_info("base dir: %s (%s free)", dir.c_str(), gib_or_unknown(free_disk_bytes(dir)).c_str());
  log_info("ranks: %d (backend %s)", c.env.world_size, c.dist->backend_name().c_str());
  doctor_collectives(c, mb);
  return check_kernels ? doctor_kernels(c) : 0;
}

void cli_register_doctor(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("doctor", "Check the installation: versions, devices, memory, disk, collectives");
  static std::string device_type;
  static double mb = 64;
  sub->add_option("--device-type", device_type, "cuda or cpu (default: cuda when a GPU is present)");
  sub->add_option("--bandwidth-mb", mb, "buffer size in MB for the collective bandwidth test")
      ->default_val(64)
      ->check(CLI::Range(0.001, 16384.0));
  static bool check_kernels = false;
  sub->add_flag("--kernels", check_kernels,
                "check every fused kernel against its ATen reference on this device (a table, then one JSON line; "
                "exit 1 when one disagrees)");
  sub->callback([&exit_code] { exit_code = doctor_run(device_type, mb, check_kernels); });
}

}  // namespace nanochat
