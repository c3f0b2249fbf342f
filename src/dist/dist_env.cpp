#include "nanochat/dist.h"

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"

namespace nanochat {

DistEnv dist_env_from_environment() {
  DistEnv env;
  bool has_rank = env_get("RANK").has_value(), has_world = env_get("WORLD_SIZE").has_value(),
       has_local = env_get("LOCAL_RANK").has_value();
  if (!has_rank && !has_world && !has_local) {
    // srun: Slurm's variables stand in for torchrun's (MASTER_ADDR must name the first node)
    if (env_get("SLURM_PROCID") && env_get("SLURM_NTASKS") && env_get("SLURM_LOCALID")) {
      env.world_size = (int)*env_int("SLURM_NTASKS", 1, 1 << 20);
      if (env.world_size == 1) return env;
      env.rank = (int)*env_int("SLURM_PROCID", 0, env.world_size - 1);
      env.local_world_size = (int)env_int("SLURM_NTASKS_PER_NODE", 1, env.world_size).value_or(env.world_size);
      env.local_rank = (int)*env_int("SLURM_LOCALID", 0, env.local_world_size - 1);
      if (!env_get("MASTER_ADDR"))
        fail(
            "running under srun with %d tasks: set MASTER_ADDR to the first node's address "
            "(e.g. MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -n1))",
            env.world_size);
      env.master_addr = *env_get("MASTER_ADDR");
      env.master_port = (int)env_int("MASTER_PORT", 1, 65535).value_or(env.master_port);
    }
    return env;  // a plain single process
  }
  if (!has_rank || !has_world || !has_local)
    fail(
        "RANK, WORLD_SIZE and LOCAL_RANK must be set together (got %s%s%s); "
        "start ranks with `nanochat launch` or torchrun",
        has_rank ? "RANK " : "", has_world ? "WORLD_SIZE " : "", has_local ? "LOCAL_RANK" : "");
  const int64_t kMaxRanks = 1 << 20;
  env.world_size = (int)*env_int("WORLD_SIZE", 1, kMaxRanks);
  env.rank = (int)*env_int("RANK", 0, env.world_size - 1);
  env.local_world_size = (int)env_int("LOCAL_WORLD_SIZE", 1, env.world_size).value_or(env.world_size);
  env.local_rank = (int)*env_int("LOCAL_RANK", 0, env.local_world_size - 1);
  if (auto addr = env_get("MASTER_ADDR")) env.master_addr = *addr;
  env.master_port = (int)env_int("MASTER_PORT", 1, 65535).value_or(env.master_port);
  return env;
}

}  // namespace nanochat
