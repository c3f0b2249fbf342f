// Tests of the kernels module as a whole: the switch, the self-check that picks each op's path,
// the CPU kernels' threads and bf16 conversion, and the MKL GEMMs they share. Each op's own tests
// (against its plain-ATen reference, finite differences in fp64, and on CUDA where a GPU is
// present) are in test_kernels_<op>.cpp.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <set>
#include <string>
#include <thread>

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/common/device.h"  // cuda_built
#include "nanochat/kernels.h"
#include "test_kernels.h"
#include "test_util.h"
#include "../src/kernels/cpu_gemm.h"     // MKL's fp32-output GEMMs
#include "../src/kernels/op_dispatch.h"  // kernels_cpu_supported, cast_float_bfloat16_cpu

using namespace nanochat;
using namespace kernels_test;

// NANOCHAT_KERNELS is read once per process, so each setting gets a process of its own: this
// binary again, running only KernelsSwitchProbe.Report, which prints what the switch decided
// (kernels_enabled, and whether adamw on an fp32 CPU tensor takes the fused path)
TEST(KernelsSwitchProbe, Report) {
  if (!std::getenv("NANOCHAT_TEST_SWITCH_PROBE")) GTEST_SKIP() << "run by Kernels.SwitchFollowsTheEnvironment";
  std::printf("enabled=%d fused=%d\n", (int)kernels_enabled(), (int)kernels_use_fused("adamw", torch::zeros({8})));
}

TEST(Kernels, SwitchFollowsTheEnvironment) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  auto probe = [&](const std::string& setting) {
    const std::string env = setting == "unset" ? "env -u NANOCHAT_KERNELS" : "env NANOCHAT_KERNELS=" + setting;
    CommandResult r = run_shell(env + " NANOCHAT_TEST_SWITCH_PROBE=1 '" + std::string(self) +
                                "' --gtest_filter=KernelsSwitchProbe.Report");
    EXPECT_EQ(r.rc, 0) << setting << ": " << r.err;
    const size_t at = r.out.find("enabled=");
    return at == std::string::npos ? std::string("no report: ") + r.out : r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string fused_on_cpu = kernels_cpu_supported() ? "1" : "0";  // the references where the CPU lacks AVX2
  EXPECT_EQ(probe("0"), "enabled=0 fused=0");
  EXPECT_EQ(probe("1"), "enabled=1 fused=" + fused_on_cpu);
  EXPECT_EQ(probe("unset"), "enabled=1 fused=" + fused_on_cpu);
  EXPECT_EQ(probe("strict"), "enabled=1 fused=" + fused_on_cpu);
}

// the self-check that picks each op's path: every op of the module is registered, and on this CPU
// each one's kernel agrees with its reference in fp32 and bf16 (where it has a kernel)
TEST(KernelsSelfCheck, EveryOpAgreesWithItsReferenceOnTheCpu) {
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  const std::vector<std::string> files = kernel_ops();
  const std::set<std::string> ops(files.begin(), files.end());
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    std::set<std::string> seen;
    for (const kernels_check_result& r : kernels_self_check(torch::kCPU, dtype)) {
      if (r.op == std::string("precision_probe") || r.op == std::string("other_thread_probe"))
        continue;                                         // registered by tests below
      seen.insert(r.part_of.empty() ? r.op : r.part_of);  // a second check names its op
      EXPECT_TRUE(r.ok) << r.op << " in " << r.dtype << ": max error " << r.max_error << " " << r.detail;
      EXPECT_EQ(r.device, "cpu");
      // which dtypes an op has a CPU kernel in is its own test's to say (test_kernels_<op>.cpp)
    }
    EXPECT_EQ(seen, ops);
  }
}

// NANOCHAT_KERNELS_FAULT=<op> (set for this test by ctest, tests/CMakeLists.txt): the op's kernel
// output is perturbed, its check fails with the error of the perturbation, the others pass, and
// the op itself now gives its reference's values
TEST(KernelsSelfCheck, APerturbedKernelFailsItsCheckAndTheOpRunsItsReference) {
  const char* faulty = std::getenv("NANOCHAT_KERNELS_FAULT");
  if (!faulty || std::string(faulty) != "mlp_relu_square") GTEST_SKIP() << "run by ctest as kernels_fault.*";
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  torch::manual_seed(3);
  Tensor x = torch::randn({4, 16}), w_fc = torch::randn({64, 16}) * 0.25, w_proj = torch::randn({16, 64}) * 0.1;
  // the first call checks every op on the CPU in fp32, then runs the reference
  EXPECT_TRUE(
      torch::equal(kernels_mlp_relu_square(x, w_fc, w_proj), kernels_mlp_relu_square_reference(x, w_fc, w_proj)));
  for (const kernels_check_result& r : kernels_self_check(torch::kCPU, torch::kFloat)) {
    if (r.op == std::string("mlp_relu_square")) {
      EXPECT_FALSE(r.ok);
      // the perturbation adds (max|y| + 1) / 2: at least half the largest output
      EXPECT_GE(r.max_error, 0.5);
    } else {
      EXPECT_TRUE(r.ok) << r.op;
    }
  }
}

// the checks run their fp32 matmuls at "highest" (training sets "high", TF32 on CUDA, ~1e-3 off,
// past the fp32 tolerance) and give the caller's setting back: a probe registered as one more
// op sees the precision inside
static at::Float32MatmulPrecision precision_seen_by_probe = at::Float32MatmulPrecision::MEDIUM;
static std::vector<Tensor> precision_probe(at::Device, at::ScalarType, bool) {
  precision_seen_by_probe = at::globalContext().float32MatmulPrecision();
  return {};  // no kernel: the probe has no row of its own to pass
}

TEST(KernelsSelfCheck, RunsAtHighestFp32MatmulPrecisionAndRestoresTheCallers) {
  kernels_register_check({"precision_probe", precision_probe});
  at::globalContext().setFloat32MatmulPrecision("high");
  kernels_self_check(torch::kCPU, torch::kFloat);
  EXPECT_EQ(precision_seen_by_probe, at::Float32MatmulPrecision::HIGHEST);
  EXPECT_EQ(at::globalContext().float32MatmulPrecision(), at::Float32MatmulPrecision::HIGH);
  at::globalContext().setFloat32MatmulPrecision("medium");
  precision_seen_by_probe = at::Float32MatmulPrecision::HIGH;
  kernels_self_check(torch::kCPU, torch::kBFloat16);
  EXPECT_EQ(precision_seen_by_probe, at::Float32MatmulPrecision::HIGHEST);
  EXPECT_EQ(at::globalContext().float32MatmulPrecision(), at::Float32MatmulPrecision::MEDIUM);
  at::globalContext().setFloat32MatmulPrecision("highest");
}

// On a GPU autograd runs a backward on its device thread, not the caller's: an op that dispatched
// in its backward asked for the verdicts from there, while the check that ran it held them, and
// both waited for good (every CUDA test and training run hung on the H200 before this held). A
// probe registered as one more op asks from another thread, as that backward did; the answer must
// come without waiting, and be the reference's.
static int answer_from_other_thread = -1;
static std::vector<Tensor> other_thread_probe(at::Device device, at::ScalarType dtype, bool) {
  std::thread([&] { answer_from_other_thread = kernels_check_passed("rotary_norm", device, dtype); }).join();
  return {};  // no kernel: the probe has no row of its own to pass
}

TEST(KernelsSelfCheck, AnotherThreadAskingDuringTheCheckGetsTheReferenceWithoutWaiting) {
  kernels_register_check({"other_thread_probe", other_thread_probe});
  auto checked = std::async(std::launch::async, [] { kernels_self_check(torch::kCPU, torch::kFloat); });
  if (checked.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    std::fprintf(stderr, "the self-check is still waiting after 120 s: deadlocked on its own probe\n");
    std::_Exit(1);  // its thread cannot be joined
  }
  checked.get();
  EXPECT_EQ(answer_from_other_thread, 0);
}

// the check's flags are scope guards: a check that throws (here an op's tolerance, read outside
// the catch around the op's own run) leaves them clear, so other threads are not kept on the
// references and this one is not kept on the kernels; a probe sees them set while it runs
static bool running_seen_by_probe = false;
static std::vector<Tensor> running_probe(at::Device, at::ScalarType, bool) {
  running_seen_by_probe = kernels_self_check_running();
  return {};
}
static double throwing_tolerance(at::Device, at::ScalarType) { throw std::runtime_error("a tolerance that throws"); }

TEST(KernelsSelfCheck, AnExceptionInsideACheckLeavesItsFlagsClear) {
  kernels_register_check({"running_probe", running_probe});
  kernels_self_check(torch::kCPU, torch::kFloat);
  EXPECT_TRUE(running_seen_by_probe);
  EXPECT_FALSE(kernels_self_check_running());
  kernels_register_check({"throwing_probe", running_probe, throwing_tolerance});
  EXPECT_THROW(kernels_self_check(torch::kCPU, torch::kFloat), std::runtime_error);
  EXPECT_FALSE(kernels_self_check_running());
}

// at::parallel_for is a header template: in a file built without -fopenmp its pragma is
// dropped and every CPU kernel runs on one thread, silently (it did, until the build said -fopenmp)
TEST(Kernels, CpuKernelsRunOnEveryIntraOpThread) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  EXPECT_EQ(cpu_kernel_threads(), 2);
  at::set_num_threads(before);
}

// row-major C = alpha op(A) op(B) + beta C against fp64 matmuls of the same values, for each
// pair of transposes, strided rows (ld > width) and both input dtypes
TEST(CpuGemm, EveryTransposeAgainstFp64) {
  torch::manual_seed(5);
  const int64_t M = 37, N = 29, K = 53, pad = 3;
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        // stored (rows, cols + pad): op(A) is (M, K), op(B) is (K, N)
        Tensor As = torch::randn({ta ? K : M, (ta ? M : K) + pad}).to(dtype);
        Tensor Bs = torch::randn({tb ? N : K, (tb ? K : N) + pad}).to(dtype);
        Tensor A = As.narrow(1, 0, ta ? M : K), B = Bs.narrow(1, 0, tb ? K : N);
        Tensor opA = (ta ? A.t() : A).to(torch::kDouble), opB = (tb ? B.t() : B).to(torch::kDouble);
        Tensor C0 = torch::randn({M, N + pad});
        Tensor C = C0.clone();
        bool ran = dtype == torch::kFloat
                       ? cpu_gemm_f32(ta, tb, M, N, K, 0.5f, As.data_ptr<float>(), As.size(1), Bs.data_ptr<float>(),
                                      Bs.size(1), 2.0f, C.data_ptr<float>(), C.size(1))
                       : cpu_gemm_f32(ta, tb, M, N, K, 0.5f, As.data_ptr<at::BFloat16>(), As.size(1),
                                      Bs.data_ptr<at::BFloat16>(), Bs.size(1), 2.0f, C.data_ptr<float>(), C.size(1));
        if (!ran) GTEST_SKIP() << "this LibTorch has no MKL";
        Tensor want = 0.5 * opA.matmul(opB) + 2.0 * C0.narrow(1, 0, N).to(torch::kDouble);
        EXPECT_LT((C.narrow(1, 0, N).to(torch::kDouble) - want).abs().max().item<double>(), 1e-4)
            << "dtype " << dtype << " trans_a " << ta << " trans_b " << tb;
        EXPECT_TRUE(C.narrow(1, N, pad).equal(C0.narrow(1, N, pad)));  // the padding is not written
      }
}

// ---- the CPU kernels' bf16 conversion ----------------------------------------------------

TEST(KernelsCpuConversion, SameBitsAsAtenBothWays) {
  // every CPU kernel rounds its fp32 results to bf16 through one row conversion (AVX512-BF16's
  // instruction where the CPU has it, which flushes denormals: such blocks take the portable
  // path). Magnitudes over fp32's whole range, denormals, signed zeros, infinities, NaNs and
  // exact ties of the rounding (low 16 bits 0x8000, both parities), in 32-value blocks and a tail
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  torch::manual_seed(11);
  const int64_t n = 100003;
  Tensor x = torch::randn({n}) * torch::pow(10.0, torch::randint(-44, 38, {n}).to(torch::kFloat));
  x.view(torch::kInt32).narrow(0, 0, 4096).bitwise_and_(~0xffff).bitwise_or_(0x8000);  // ties
  x[5000] = 0.0f, x[5001] = -0.0f, x[5002] = INFINITY, x[5003] = -INFINITY, x[5004] = NAN;
  x[5005] = 1e-40f, x[5006] = -3e-39f, x[5007] = 1.17549435e-38f;  // denormals, the smallest normal
  Tensor y = cast_float_bfloat16_cpu(x), want = x.to(torch::kBFloat16);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  Tensor nan = want.isnan();
  EXPECT_TRUE(torch::equal(y.isnan(), nan));
  Tensor differ = (y.view(torch::kInt16) != want.view(torch::kInt16)) & ~nan;
  EXPECT_EQ(differ.sum().item<int64_t>(), 0)
      << "first differing element: " << (differ.any().item<bool>() ? differ.nonzero()[0][0].item<int64_t>() : -1);
  Tensor g = torch::randn({n}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(cast_float_bfloat16_cpu(g), g.to(torch::kFloat)));
}
