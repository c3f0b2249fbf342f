// base dir, atomic files, thread pool, progress, device policy)
#pragma once
#include "nanochat/common/atomic_file.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/device.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "nanochat/common/progress.h"
#include "nanochat/common/thread_pool.h"
#include "nanochat/common/utf8.h"
