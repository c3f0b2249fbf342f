// defines: nothing
// compute_init moved above dist and kernels (nanochat/compute.h); the stages that still include
// this path reach it here until their one include line changes
#pragma once
#include "nanochat/compute.h"
