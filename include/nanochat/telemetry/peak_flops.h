// Nominal dense BF16 FLOPS and memory bandwidth of an accelerator by its name (upstream's common.get_peak_flops table),
// for MFU and the inference benchmark. The name is lower-cased; the first pattern whose
// words all appear wins; an unknown device gives +inf (so MFU shows 0).
// A CPU is in no table: its peaks are measured on the spot by two short probes.
#pragma once
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace nanochat {

// compute_units: only Intel's "Data Center GPU Max 1550" needs it (512 x units x 1.3 GHz)
double peak_flops(const std::string& device_name, int compute_units = 0);
double peak_bandwidth(const std::string& device_name);

// this CPU's matmul FLOP/s in `dtype` with the current intra-op threads: the best rate of
// square matmuls (512, then 1024 when that is quick enough) over about `seconds` in all
double peak_flops_measure_cpu(c10::ScalarType dtype, double seconds = 0.3);
// this CPU's memory bandwidth in bytes/s: STREAM's triad a = b + s*c on fp32 arrays far larger
// than any cache (3 x 64 MiB, counted as 12 bytes an element), best of about `seconds`
double peak_bandwidth_measure_cpu(double seconds = 0.2);

// a training run's peak for MFU: a GPU's nominal BF16 FLOPS by its name, or on the CPU its
// matmul rate measured now in `dtype` with `cpu_threads` threads (~0.3 s); logged
double peak_flops_of_run(const c10::Device& device, c10::ScalarType dtype, int cpu_threads);
// the training log's name for MFU, by the dtype of that peak: "bf16_mfu" on a GPU (upstream's
// label), on the CPU the run's dtype ("fp32_mfu", "bf16_mfu", "fp16_mfu")
std::string mfu_label_for(const c10::Device& device, c10::ScalarType dtype);

}  // namespace nanochat
