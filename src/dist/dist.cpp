#include "nanochat/dist.h"

#include <algorithm>
#include <exception>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "nanochat/common/device.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"

namespace nanochat {

torch::Tensor DistWork::wait() {
  if (work) work->wait();
  return finish ? finish() : torch::Tensor();
}

std::pair<int64_t, int64_t> dist_shard_range(int64_t n, int world, int rank) {
  int64_t chunk = (n + world - 1) / world;
  int64_t begin = std::min(n, chunk * rank), end = std::min(n, chunk * (rank + 1));
  return {begin, end};
}

static c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return c10d::ReduceOp::SUM;
    case ReduceOp::AVG: return c10d::ReduceOp::AVG;
    case ReduceOp::MAX: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// One clear line where c10d would throw deep inside the backend, or NCCL crash, on a tensor
// the group cannot take: NCCL takes CUDA tensors only, Gloo CPU ones. Both take the floats and
// integers below and bool; NCCL also moves the two float8s, but reduces none (ProcessGroupNCCL);
// Gloo refuses float8, int16 and the unsigned wider than 8 bits ("Invalid scalar type").
// Complex is refused on both: NCCL's C++ backend has no complex type (Python views it as real
// pairs). Checked with one process too, so that a single-GPU run catches what eight would.
static void check_tensor(const Dist& dist, const char* collective, const char* which, const torch::Tensor& t,
                         bool reduces) {
  static const std::vector<c10::ScalarType> kBoth = {torch::kFloat32,  torch::kFloat64, torch::kFloat16,
                                                     torch::kBFloat16, torch::kInt8,    torch::kUInt8,
                                                     torch::kInt32,    torch::kInt64,   torch::kBool};
  static const std::vector<c10::ScalarType> kNcclMoves = {c10::ScalarType::Float8_e4m3fn, c10::ScalarType::Float8_e5m2};
  const bool nccl = dist.device().is_cuda();
  if (!t.defined()) fail("dist %s: its %s tensor is undefined", collective, which);
  auto in = [&](const std::vector<c10::ScalarType>& v) {
    return std::find(v.begin(), v.end(), t.scalar_type()) != v.end();
  };
  if (t.device().type() == dist.device().type() && (in(kBoth) || (nccl && !reduces && in(kNcclMoves)))) return;
  std::string names;
  for (c10::ScalarType d : kBoth) names += (names.empty() ? "" : ", ") + dtype_name(d);
  if (nccl && !reduces)
    for (c10::ScalarType d : kNcclMoves) names += ", " + dtype_name(d);
  fail("dist %s: its %s tensor is %s on %s, but the process group (%s) takes %s tensors of %s", collective, which,
       dtype_name(t.scalar_type()).c_str(), t.device().str().c_str(), nccl ? "NCCL" : "Gloo",
       c10::DeviceTypeName(dist.device().type(), /*lower_case=*/true).c_str(), names.c_str());
}

Dist::Dist(const DistEnv& env, const torch::Device& device) : env_(env), device_(device) {
  log_set_rank(env.rank, env.world_size);
  if (env.world_size == 1) return;
  auto timeout = std::chrono::milliseconds(1000 * env_int("NANOCHAT_DIST_TIMEOUT", 1, 86400).value_or(600));
  c10d::TCPStoreOptions opts;
  opts.port = (uint16_t)env.master_port;
  opts.isServer = env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    fail(
        "rank %d cannot reach the rendezvous at MASTER_ADDR=%s MASTER_PORT=%d (%s); check the "
        "address, or pick a free port with --master-port",
        env.rank, env.master_addr.c_str(), env.master_port, c10::GetExceptionString(e).substr(0, 200).c_str());
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("nanochat", store);
  backend_ = device.is_cuda() ? dist_nccl_create(prefixed, env, timeout) : dist_gloo_create(prefixed, env, timeout);
  barrier();  // like nanochat's compute_init: everyone is up before anything else happens
  log_debug("process group %s up: rank %d of %d", backend_name().c_str(), env.rank, env.world_size);
}

// A last barrier, then the group shut down before it is freed: NCCL otherwise warns that its
// communicators were never destroyed and aborts them, and a rank that left early could tear
// down a communicator another rank is still using. A rank leaving on an exception skips the
// barrier (the others may never come to it) but still shuts its group down.
Dist::~Dist() {
  if (!backend_) return;
  try {
    if (std::uncaught_exceptions() == 0) barrier();
  } catch (const std::exception& e) {
    log_warn("rank %d: the last barrier failed (%s)", env_.rank, c10::GetExceptionString(e).substr(0, 200).c_str());
  }
  try {
    backend_->shutdown();
  } catch (const std::exception& e) {
    log_warn("rank %d: shutting the process group down failed (%s)", env_.rank,
             c10::GetExceptionString(e).substr(0, 200).c_str());
  }
}

std::string Dist::backend_name() const { return backend_ ? backend_->getBackendName() : "none"; }

DistWork Dist::all_reduce_async(torch::Tensor tensor, ReduceOp op) {
  check_tensor(*this, "all_reduce", "input", tensor, /*reduces=*/true);
  if (!backend_) return {nullptr, [tensor] { return tensor; }};
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  return {backend_->allreduce(tensors, opts), [tensor] { return tensor; }};
}

DistWork Dist::reduce_scatter_async(const torch::Tensor& input, ReduceOp op) {
  check_tensor(*this, "reduce_scatter", "input", input, /*reduces=*/true);
  TORCH_CHECK(input.dim() >= 1, "reduce_scatter needs a tensor with at least one dimension");
  int64_t n = input.size(0);
  auto [begin, end] = dist_shard_range(n, env_.world_size, env_.rank);
  if (!backend_) return {nullptr, [input] { return input; }};
  int64_t chunk = (n + env_.world_size - 1) / env_.world_size;
  torch::Tensor padded = input.contiguous();
  if (chunk * env_.world_size != n) {  // zero rows on the wire: collectives want equal chunks
    std::vector<int64_t> shape = input.sizes().vec();
    shape[0] = chunk * env_.world_size - n;
    padded = torch::cat({padded, torch::zeros(shape, input.options())});
  }
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape[0] = chunk;
  torch::Tensor out = torch::empty(out_shape, input.options());
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = to_c10d(op);
  auto work = backend_->_reduce_scatter_base(out, padded, opts);
  int64_t rows = end - begin;
  return {work, [out, padded, rows] { return out.narrow(0, 0, rows); }};
}

DistWork Dist::all_gather_async(const torch::Tensor& shard, int64_t total_rows) {
  check_tensor(*this, "all_gather", "shard", shard, /*reduces=*/false);
  auto [begin, end] = dist_shard_range(total_rows, env_.world_size, env_.rank);
  TORCH_CHECK(shard.dim() >= 1 && shard.size(0) == end - begin, "all_gather: rank ", env_.rank, " must pass rows [",
              begin, ", ", end, ") of ", total_rows, ", got ", shard.dim() ? shard.size(0) : 0);
  if (!backend_) return {nullptr, [shard] { return shard; }};
  int64_t chunk = (total_rows + env_.world_size - 1) / env_.world_size;
  torch::Tensor padded = shard.contiguous();
  if (padded.size(0) != chunk) {
    std::vector<int64_t> shape = shard.sizes().vec();
    shape[0] = chunk - padded.size(0);
    padded = torch::cat({padded, torch::zeros(shape, shard.options())});
  }
  std::vector<int64_t> out_shape = shard.sizes().vec();
  out_shape[0] = chunk * env_.world_size;
  torch::Tensor out = torch::empty(out_shape, shard.options());
  traffic_.all_gathers++;
  traffic_.all_gather_bytes += (int64_t)out.nbytes();
  auto work = backend_->_allgather_base(out, padded, c10d::AllgatherOptions());
  return {work, [out, padded, total_rows] { return out.narrow(0, 0, total_rows); }};
}

DistWork Dist::all_gather_into_async(torch::Tensor full) {
  check_tensor(*this, "all_gather_into", "output", full, /*reduces=*/false);
  if (full.dim() < 1 || full.size(0) % env_.world_size != 0 || !full.is_contiguous())
    fail("dist all_gather_into: its output must be contiguous with rows a multiple of the %d ranks, got %s%s",
         env_.world_size, c10::str(full.sizes()).c_str(), full.is_contiguous() ? "" : " (not contiguous)");
  if (!backend_) return {nullptr, [full] { return full; }};
  auto [begin, end] = dist_shard_range(full.size(0), env_.world_size, env_.rank);
  traffic_.all_gathers++;
  traffic_.all_gather_bytes += (int64_t)full.nbytes();
  // the input a view of the output at this rank's rows: NCCL's in-place all-gather; Gloo
  // gathers into its own buffer and copies out after
  torch::Tensor mine = full.narrow(0, begin, end - begin);
  auto work = backend_->_allgather_base(full, mine, c10d::AllgatherOptions());
  return {work, [full, mine] { return full; }};
}

void Dist::broadcast(torch::Tensor tensor, int root) {
  check_tensor(*this, "broadcast", "input", tensor, /*reduces=*/false);
  if (!backend_) return;
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  backend_->broadcast(tensors, opts)->wait();
}

void Dist::barrier() {
  if (!backend_) return;
  c10d::BarrierOptions opts;
  if (device_.is_cuda()) opts.device_ids = {device_.index()};
  backend_->barrier(opts)->wait();
}

bool dist_any_rank(Dist& dist, bool flag) {
  if (dist.world_size() == 1) return flag;  // alone: no collective, and no wait for the device
  torch::Tensor t = torch::tensor({(int64_t)flag}, torch::kLong).to(dist.device());
  dist.all_reduce(t, ReduceOp::MAX);
  return t.item<int64_t>() != 0;
}

}  // namespace nanochat
