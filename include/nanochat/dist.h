// Data parallelism over PyTorch's c10d: a TCPStore rendezvous and ProcessGroupNCCL on CUDA
// or ProcessGroupGloo on CPU. nanochat has no DDP wrapper (upstream never wraps the model): the optimizer and
// the loaders call these collectives themselves. With one process every collective is the
// identity, so callers never branch on the world size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/common/tensor.h"
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace nanochat {

// torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
struct DistEnv {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};
// none of RANK/WORLD_SIZE/LOCAL_RANK set -> one process; some but not all, or a bad value
// -> Error naming the variable
DistEnv dist_env_from_environment();

enum class ReduceOp { SUM, AVG, MAX };

// A collective in flight. wait() blocks until it is done and returns its result.
struct DistWork {
  c10::intrusive_ptr<c10d::Work> work;    // null when there was nothing to communicate
  std::function<torch::Tensor()> finish;  // turns the raw buffers into the result
  torch::Tensor wait();
};

// Rows [begin, end) of dim 0 that `rank` owns when n rows are sharded over `world` ranks:
// chunks of ceil(n / world) rows, the last ones shorter or empty (nanochat pads the same way).
std::pair<int64_t, int64_t> dist_shard_range(int64_t n, int world, int rank);

// what this rank's all-gathers received, counted in their output buffers' bytes (with
// one process: nothing, no collective runs)
struct DistTraffic {
  int64_t all_gathers = 0, all_gather_bytes = 0;
};

class Dist {
 public:
  // world_size 1: no process group at all. Otherwise connects to the store at
  // MASTER_ADDR:MASTER_PORT (rank 0 hosts it) and creates NCCL (cuda) or Gloo (cpu).
  Dist(const DistEnv& env, const torch::Device& device);
  // a last barrier (skipped while an exception unwinds), then the group's shutdown()
  ~Dist();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }
  const torch::Device& device() const { return device_; }
  std::string backend_name() const;  // "nccl", "gloo", or "none"

  // in place on every rank
  DistWork all_reduce_async(torch::Tensor tensor, ReduceOp op);
  void all_reduce(torch::Tensor tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }
  // reduces `input` over ranks and returns this rank's rows (dist_shard_range of dim 0);
  // any number of rows works, rows are zero-padded on the wire
  DistWork reduce_scatter_async(const torch::Tensor& input, ReduceOp op);
  torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op) {
    return reduce_scatter_async(input, op).wait();
  }
  // inverse of reduce_scatter's sharding: every rank passes its rows of a total_rows tensor
  DistWork all_gather_async(const torch::Tensor& shard, int64_t total_rows);
  torch::Tensor all_gather(const torch::Tensor& shard, int64_t total_rows) {
    return all_gather_async(shard, total_rows).wait();
  }
  // in place (upstream's all_gather_into_tensor(p, p_slice)): full's rows of this rank
  // (dist_shard_range of full.size(0), a multiple of the world size; full contiguous) hold its
  // shard, and the other ranks' rows arrive around them; wait() returns full
  DistWork all_gather_into_async(torch::Tensor full);
  const DistTraffic& traffic() const { return traffic_; }
  void broadcast(torch::Tensor tensor, int root);
  void barrier();

 private:
  DistEnv env_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Backend> backend_;  // null when world_size == 1
  DistTraffic traffic_;
};

// true on every rank when `flag` is true on any (an all-reduce MAX): a decision all ranks
// share, such as "stop now" or "the epoch is over"
bool dist_any_rank(Dist& dist, bool flag);

// the collective self-test of `nanochat doctor`: each collective on known values (checked
// against sums computed by hand) and timed on a large buffer
struct DistSelfTestResult {
  std::string name;
  bool ok;
  std::string detail;     // what went wrong, when !ok
  double bytes, seconds;  // of the timed run; bus bandwidth = bytes * factor / seconds
  double bus_gb_per_s;
};
std::vector<DistSelfTestResult> dist_self_test(Dist& dist, int64_t timed_bytes);

// backend factories (src/dist/gloo.cpp; src/dist/nccl_cuda.cpp, or nccl_nocuda.cpp where the build has no CUDA)
c10::intrusive_ptr<c10d::Backend> dist_gloo_create(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                                   std::chrono::milliseconds timeout);
c10::intrusive_ptr<c10d::Backend> dist_nccl_create(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                                   std::chrono::milliseconds timeout);

}  // namespace nanochat
