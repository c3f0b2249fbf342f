// Never a silent CPU run on a GPU node: when the machine has an NVIDIA driver but LibTorch sees no
// GPU (a driver too old for the wheel's CUDA, a CPU wheel, no device in the container),
// device_autodetect("") stops with gpu_unusable_reason's line instead of picking the CPU;
// --device-type cpu still runs there. doctor prints the driver next to the wheel's CUDA.
#pragma once
#include <string>

namespace nanochat {

// The NVIDIA driver's version ("550.54.15") when this machine has one: the kernel module's
// /proc/driver/nvidia/version (NANOCHAT_NVIDIA_DRIVER_FILE names another file, for tests), else
// `nvidia-smi --query-gpu=driver_version` on PATH; "" when neither answers.
std::string nvidia_driver_version();
// the newest CUDA major a driver runs: 13 from 580, 12 from 525 (minor-version compatibility),
// 0 below (NVIDIA's table of minimum drivers)
int cuda_major_for_driver(const std::string& driver_version);
// the CUDA runtime the LibTorch in this process carries ("13.0"); "" for a LibTorch without CUDA
std::string libtorch_cuda_version();
// "" unless the machine has an NVIDIA driver and LibTorch sees no GPU; then one line naming the
// driver, the CUDA this LibTorch needs and the fix
std::string gpu_unusable_reason();

}  // namespace nanochat
