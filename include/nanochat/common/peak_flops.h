// defines: peak_flops, peak_bandwidth
// Nominal dense BF16 FLOPS and memory bandwidth of an accelerator by its name (upstream's common.get_peak_flops table),
// for MFU and the inference benchmark. The name is lower-cased; the first pattern whose
// words all appear wins; an unknown device gives +inf (so MFU shows 0).
#pragma once
#include <string>

namespace nanochat {

// compute_units: only Intel's "Data Center GPU Max 1550" needs it (512 x units x 1.3 GHz)
double peak_flops(const std::string& device_name, int compute_units = 0);
double peak_bandwidth(const std::string& device_name);

}  // namespace nanochat
