// metrics log (JSONL), TensorBoard event files, loss readbacks that do not stall the device, and
// the peak FLOPS and bandwidth that MFU and the inference benchmark divide by
#pragma once
#include "nanochat/telemetry/deferred_readback.h"
#include "nanochat/telemetry/metrics_log.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/telemetry/tensorboard_writer.h"
#include "nanochat/telemetry/train_progress.h"
