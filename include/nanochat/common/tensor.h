// What a header needs to name tensors, without all of ATen: at::Tensor and its methods, devices,
// dtypes, options and generators (ATen/core/Tensor.h: a few seconds of the compiler's time where
// <torch/types.h>, through ATen/ATen.h, takes ten or more), and the torch:: spellings of them
// that the code uses (torch::Tensor, torch::Device, torch::kFloat), declared as torch/types.h
// declares them. A file that calls ATen's functions (at::zeros, at::matmul) includes their
// <ATen/ops/NAME.h>, or all of them at once with <ATen/ATen.h>.
#pragma once
#include <ATen/core/Tensor.h>

namespace torch {
using namespace at;  // NOLINT: torch/types.h's own line
}  // namespace torch
