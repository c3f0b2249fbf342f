// ProcessGroupGloo: the CPU backend. The 2.x wheel's Gloo has AVG, bf16, reduce_scatter and
// all_gather into one tensor (checked by tests/test_dist.cpp), so no emulation is needed.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "nanochat/common/env.h"
#include "nanochat/dist.h"

namespace nanochat {

static bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

c10::intrusive_ptr<c10d::Backend> dist_gloo_create(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                                   std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = timeout;
  // GLOO_SOCKET_IFNAME as in PyTorch; a loopback master means a single-node run
  if (auto ifname = env_get("GLOO_SOCKET_IFNAME"))
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*ifname));
  else if (is_loopback(env.master_addr))
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, opts);
}

}  // namespace nanochat
