// The model's last step fused: lm_head matmul, softcap, cross-entropy. The reference
// materialises the (N, V) logits in fp32 several times over (the matmul output, its fp32
// copy, tanh, the softcap product, log_softmax, and as many again in backward: ~17 GB kept
// for backward at d20, B=32). The fused op walks the rows in chunks (chunk_rows): per chunk
// one matmul into a compute-dtype buffer and one pass that leaves only a loss and a
// log-sum-exp per row. Backward of the per-token losses recomputes each chunk's logits and
// turns them into d loss / d logits in place; the mean (training) does that in its forward.
#include "nanochat/kernels.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "cpu_gemm.h"
#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the kernels (linear_softcap_ce_cpu.cpp, linear_softcap_ce.cu) over one chunk of rows: logits
// (n, ld) in the compute dtype, of which the first `vocab` columns count; targets (n,) int64
// (-1 = ignored); loss and lse (n,) fp32 (fp64 for fp64 logits).
// forward: z = cap*tanh(l/cap), lse = logsumexp(z), loss = lse - z[target] (0 where ignored)
// backward, in place: logits become d loss / d logits for grad_loss (n,):
//   grad * (softmax(z) - onehot(target)) * (1 - (z/cap)^2), 0 in ignored rows and columns >= vocab
// forward_backward (CPU): both at once while the row is in cache, for a gradient known up front
void softcap_ce_forward_cpu(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                            torch::Tensor& loss, torch::Tensor& lse);
void softcap_ce_backward_cpu(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                             const torch::Tensor& grad_loss, int64_t vocab, double cap);
void softcap_ce_forward_backward_cpu(torch::Tensor& logits, const torch::Tensor& targets,
                                     const torch::Tensor& grad_loss, int64_t vocab, double cap, torch::Tensor& loss,
                                     torch::Tensor& lse);
void softcap_ce_forward_cuda(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                             torch::Tensor& loss, torch::Tensor& lse);
void softcap_ce_backward_cuda(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                              const torch::Tensor& grad_loss, int64_t vocab, double cap);
// forward_backward (CUDA): the row held in registers, read once; false, nothing done, when a row
// does not fit them
bool softcap_ce_forward_backward_cuda(torch::Tensor& logits, const torch::Tensor& targets,
                                      const torch::Tensor& grad_loss, int64_t vocab, double cap, torch::Tensor& loss,
                                      torch::Tensor& lse);

namespace {

// a 2-D CPU matrix as BLAS sees it: rows contiguous (ld = stride(0)), or a transposed view of
// such a matrix (ld = stride(1)); false for other strides
bool blas_layout(const torch::Tensor& m, bool& transposed, int64_t& ld) {
  if (m.stride(1) == 1 && m.stride(0) >= std::max<int64_t>(1, m.size(1))) {
    transposed = false, ld = m.stride(0);
    return true;
  }
  if (m.stride(0) == 1 && m.stride(1) >= std::max<int64_t>(1, m.size(0))) {
    transposed = true, ld = m.stride(1);
    return true;
  }
  return false;
}

// acc (fp32, contiguous) += a @ b for bf16 a and b on the CPU, accumulated in the GEMM
bool cpu_addmm_bf16_into_f32(torch::Tensor& acc, const torch::Tensor& a, const torch::Tensor& b) {
  bool ta, tb;
  int64_t lda, ldb;
  if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || acc.scalar_type() != at::kFloat ||
      !acc.is_contiguous() || !blas_layout(a, ta, lda) || !blas_layout(b, tb, ldb))
    return false;
  return cpu_gemm_f32(ta, tb, a.size(0), b.size(1), a.size(1), 1.0f, a.data_ptr<at::BFloat16>(), lda,
                      b.data_ptr<at::BFloat16>(), ldb, 1.0f, acc.data_ptr<float>(), acc.size(1));
}

// acc += a @ b, with acc in fp32/fp64 and a, b in the compute dtype: bf16 into fp32 in the GEMM
// itself on CUDA and, through MKL (cpu_gemm.h), on the CPU; elsewhere a product then an add
void addmm_acc(torch::Tensor& acc, const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() == acc.scalar_type()) acc.addmm_(a, b);
  else if (a.is_cuda()) at::addmm_out(acc, acc, a, b, acc.scalar_type());  // fp32 accumulation in the GEMM
  else if (!cpu_addmm_bf16_into_f32(acc, a, b)) acc.add_(at::mm(a, b));    // ATen: a bf16 product, then the add
}

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// rows per chunk: ~128 MB of logits on the CPU (measured at d4, vocab 32768: 8 MB chunks cost
// the matmuls 10-30% of their speed, 128 MB beat 32 MB by 3% in fp32 and 12% in bf16), ~1 GB on
// a GPU -- against the several (B*T, V) fp32 copies of the reference
int64_t chunk_rows(const Tensor& x, int64_t padded_vocab, int64_t requested) {
  if (requested > 0) return requested;
  const int64_t budget = x.is_cuda() ? (int64_t(1) << 30) : (int64_t(128) << 20);
  return std::max<int64_t>(16, budget / (padded_vocab * x.element_size()));
}

Tensor acc_empty(const Tensor& x, int64_t n) {
  return at::empty({n}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
}

void forward_chunk(const Tensor& logits, const Tensor& targets, int64_t vocab, double cap, Tensor& loss, Tensor& lse) {
  KERNELS_CUDA_OR_CPU(logits.is_cuda(), softcap_ce_forward_cuda(logits, targets, vocab, cap, loss, lse),
                      softcap_ce_forward_cpu(logits, targets, vocab, cap, loss, lse));
}

void backward_chunk(Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad, int64_t vocab,
                    double cap) {
  KERNELS_CUDA_OR_CPU(logits.is_cuda(), softcap_ce_backward_cuda(logits, targets, lse, grad, vocab, cap),
                      softcap_ce_backward_cpu(logits, targets, lse, grad, vocab, cap));
}

// the training mean's chunk: loss, lse and, in place, d loss / d logits for a gradient known up
// front. The CPU visits each row once; CUDA runs the forward then the backward kernel (two
// reads of the chunk), or with one_pass the kernel that reads it once where a row fits
void forward_backward_chunk(Tensor& logits, const Tensor& targets, const Tensor& grad, int64_t vocab, double cap,
                            Tensor& loss, Tensor& lse, bool one_pass) {
  if (!logits.is_cuda()) return softcap_ce_forward_backward_cpu(logits, targets, grad, vocab, cap, loss, lse);
  if (one_pass &&
      KERNELS_CUDA_OR_CPU(true, softcap_ce_forward_backward_cuda(logits, targets, grad, vocab, cap, loss, lse), false))
    return;
  forward_chunk(logits, targets, vocab, cap, loss, lse);
  backward_chunk(logits, targets, lse, grad, vocab, cap);
}

// a chunk's d loss / d logits multiplied out: its rows of x's gradient, and its share of the
// weight's (summed over chunks in fp32)
void multiply_out(const Tensor& dlogits, const Tensor& x_rows, const Tensor& w, Tensor dx_rows, Tensor& dw) {
  at::mm_out(dx_rows, dlogits, w);
  addmm_acc(dw, dlogits.t(), x_rows);
}

struct LinearSoftcapCE : public torch::autograd::Function<LinearSoftcapCE> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& targets,
                        int64_t vocab, double cap, int64_t rows_requested) {
    const int64_t N = x.size(0);
    const Tensor w = weight.to(x.scalar_type());
    Tensor loss = acc_empty(x, N), lse = acc_empty(x, N);
    const int64_t rows = chunk_rows(x, w.size(0), rows_requested);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      Tensor logits = at::mm(x.narrow(0, r0, n), w.t());
      Tensor l = loss.narrow(0, r0, n), s = lse.narrow(0, r0, n);
      forward_chunk(logits, targets.narrow(0, r0, n), vocab, cap, l, s);
    }
    ctx->save_for_backward({x, weight, targets, lse});
    ctx->saved_data["vocab"] = vocab;
    ctx->saved_data["cap"] = cap;
    ctx->saved_data["rows"] = rows;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const int64_t vocab = ctx->saved_data["vocab"].toInt();
    const double cap = ctx->saved_data["cap"].toDouble();
    const Tensor grad = grads[0].contiguous().to(lse.scalar_type());
    const int64_t N = x.size(0);
    const Tensor w = weight.to(x.scalar_type());
    Tensor dx = at::empty_like(x);
    // the weight's gradient is summed over chunks in fp32 (fp64 for fp64)
    Tensor dw = at::zeros(weight.sizes(), weight.options().dtype(lse.scalar_type()));
    const int64_t rows = ctx->saved_data["rows"].toInt();
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      const Tensor xc = x.narrow(0, r0, n);
      Tensor dlogits = at::mm(xc, w.t());
      backward_chunk(dlogits, targets.narrow(0, r0, n), lse.narrow(0, r0, n), grad.narrow(0, r0, n), vocab, cap);
      multiply_out(dlogits, xc, w, dx.narrow(0, r0, n), dw);
    }
    return {dx, dw.to(weight.scalar_type()), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// dx * g with one rounding. g is the incoming scalar, 1/grad_accum in training; a bf16 dx times
// g rounded to bf16 first (1/3 -> 0.333984375, 0.2% high) is exact only for powers of two, so
// a low-precision dx is scaled in fp32 and rounded once: the correctly rounded dx/3 or dx/6.
// Row chunks bound the fp32 copy (64 MiB).
Tensor scale_gradient(const Tensor& dx, const Tensor& g) {
  if (dx.scalar_type() != at::kBFloat16 && dx.scalar_type() != at::kHalf) return dx * g.to(dx.scalar_type());
  const Tensor gf = g.to(at::kFloat);
  Tensor out = at::empty_like(dx);
  const int64_t N = dx.size(0), rows = std::max<int64_t>(1, (int64_t(1) << 24) / std::max<int64_t>(1, dx.size(1)));
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    out.narrow(0, r0, n).copy_(dx.narrow(0, r0, n).to(at::kFloat).mul_(gf));
  }
  return out;
}

// The mean over counted tokens, for training: d mean / d logits is known in the forward
// (1/count a counted row), so the forward computes the gradients too, while each chunk's
// logits are at hand, and backward only scales them by the incoming scalar -- three matmuls
// a chunk instead of four, and no second pass over the logits (Liger's fused linear
// cross-entropy does the same). fp16 keeps the recompute path: its unscaled gradients could
// underflow before the loss scale reaches them.
struct LinearSoftcapCEMean : public torch::autograd::Function<LinearSoftcapCEMean> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& targets,
                        int64_t vocab, double cap, int64_t rows_requested, bool one_pass) {
    const int64_t N = x.size(0);
    const Tensor w = weight.to(x.scalar_type());
    Tensor loss = acc_empty(x, N), lse = acc_empty(x, N);
    const Tensor counted = (targets != -1).to(loss.scalar_type());
    const Tensor count = counted.sum();
    const Tensor grad_rows = counted / count;  // d mean / d loss_i, on the device: no host sync
    Tensor dx = at::empty_like(x);
    Tensor dw = at::zeros(weight.sizes(), weight.options().dtype(loss.scalar_type()));
    const int64_t rows = chunk_rows(x, w.size(0), rows_requested);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      const Tensor xc = x.narrow(0, r0, n), tc = targets.narrow(0, r0, n), gc = grad_rows.narrow(0, r0, n);
      Tensor logits = at::mm(xc, w.t());
      Tensor l = loss.narrow(0, r0, n), s = lse.narrow(0, r0, n);
      forward_backward_chunk(logits, tc, gc, vocab, cap, l, s, one_pass);
      multiply_out(logits, xc, w, dx.narrow(0, r0, n), dw);
    }
    ctx->save_for_backward({dx, dw});
    ctx->saved_data["weight_dtype"] = (int64_t)weight.scalar_type();
    return loss.sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor g = grads[0];
    const auto weight_dtype = (at::ScalarType)ctx->saved_data["weight_dtype"].toInt();
    return {
        scale_gradient(saved[0], g), (saved[1] * g).to(weight_dtype), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

void check_inputs(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t vocab) {
  if (x.dim() != 2 || weight.dim() != 2 || x.size(1) != weight.size(1) || vocab > weight.size(0) ||
      targets.dim() != 1 || targets.size(0) != x.size(0))
    fail("linear_softcap_ce: x (N, C), weight (V >= vocab, C) and targets (N,) expected");
}

// the fused mean with its gradients precomputed, the CUDA chunks in one pass or two
Tensor fused_mean(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t vocab, double cap,
                  int64_t chunk_rows, bool one_pass) {
  return kernels_fault("linear_softcap_ce", LinearSoftcapCEMean::apply(x.contiguous(), weight, targets.contiguous(),
                                                                       vocab, cap, chunk_rows, one_pass));
}

// NANOCHAT_CE_PASSES=1: the training mean's CUDA chunks in one pass, where its own check passed
// (linear_softcap_ce_one_pass). Two passes stay the default until a GPU's bench_kernels shows
// which is faster (docs/kernels.md).
bool ce_one_pass(const Tensor& x) {
  const char* v = std::getenv("NANOCHAT_CE_PASSES");
  return x.is_cuda() && v && std::string(v) == "1" &&
         kernels_check_passed("linear_softcap_ce_one_pass", x.device(), x.scalar_type());
}

}  // namespace

Tensor kernels_linear_softcap_ce_reference(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t vocab,
                                           double cap) {
  check_inputs(x, weight, targets, vocab);
  Tensor logits = at::linear(x, weight.to(x.scalar_type())).narrow(-1, 0, vocab);
  logits = logits.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  logits = cap * at::tanh(logits / cap);
  return at::cross_entropy_loss(logits, targets, std::nullopt, at::Reduction::None, -1);
}

Tensor kernels_linear_softcap_ce(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t vocab,
                                 double cap, int64_t chunk_rows) {
  if (!kernels_use_fused("linear_softcap_ce", x))
    return kernels_linear_softcap_ce_reference(x, weight, targets, vocab, cap);
  check_inputs(x, weight, targets, vocab);
  return kernels_fault("linear_softcap_ce",
                       LinearSoftcapCE::apply(x.contiguous(), weight, targets.contiguous(), vocab, cap, chunk_rows));
}

Tensor kernels_linear_softcap_ce_mean_reference(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                                int64_t vocab, double cap) {
  return kernels_linear_softcap_ce_reference(x, weight, targets, vocab, cap).sum() / (targets != -1).sum();
}

Tensor kernels_linear_softcap_ce_mean(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t vocab,
                                      double cap, int64_t chunk_rows) {
  if (!kernels_use_fused("linear_softcap_ce", x))
    return kernels_linear_softcap_ce_mean_reference(x, weight, targets, vocab, cap);
  check_inputs(x, weight, targets, vocab);
  const bool wants_grad = torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  if (!wants_grad || x.scalar_type() == at::kHalf)  // eval: no gradient to precompute; fp16: see above
    return kernels_linear_softcap_ce(x, weight, targets, vocab, cap, chunk_rows).sum() / (targets != -1).sum();
  return fused_mean(x, weight, targets, vocab, cap, chunk_rows, ce_one_pass(x));
}

namespace {

// the self-check: 48 rows of width 32 against a padded vocab of 80 (72 counted), chunks of 16
// rows, two targets ignored; then d24's vocab of 32768 (the CUDA kernel's multi-warp rows), on
// 1024 rows of width 1536 on a GPU and 4 rows of width 32 on the CPU; the per-token losses and
// the mean, with their gradients
std::vector<Tensor> linear_softcap_ce_check(at::Device device, at::ScalarType dtype, bool fused) {
  struct Shape {
    int64_t rows, width, padded_vocab, vocab, chunk;
  };
  std::vector<Shape> shapes = {{48, 32, 80, 72, 16}};
  if (kernels_check_real_shapes(device)) shapes.push_back({1024, d24::n_embd, d24::vocab, d24::vocab, 512});
  else shapes.push_back({4, 32, d24::vocab, d24::vocab, 2});
  std::vector<Tensor> out;
  for (const Shape& s : shapes) {
    auto gen = kernels_check_generator(device, 3);
    Tensor x = at::randn({s.rows, s.width}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor w = (at::randn({s.padded_vocab, s.width}, gen, at::device(device)) *
                (0.5 * std::sqrt(32.0 / (double)s.width)))
                   .to(device, at::kFloat)
                   .requires_grad_();
    Tensor targets = at::randint(0, s.vocab, {s.rows}, gen, at::device(device).dtype(at::kLong))
                         .index_fill_(0, at::tensor(std::vector<int64_t>{1, s.rows - 2}).to(device), -1);
    Tensor dloss = at::rand({s.rows}, gen, at::device(device)).to(device);
    for (bool mean : {false, true}) {
      Tensor loss = mean ? (fused ? kernels_linear_softcap_ce_mean(x, w, targets, s.vocab, 15.0, s.chunk)
                                  : kernels_linear_softcap_ce_mean_reference(x, w, targets, s.vocab, 15.0))
                         : (fused ? kernels_linear_softcap_ce(x, w, targets, s.vocab, 15.0, s.chunk)
                                  : kernels_linear_softcap_ce_reference(x, w, targets, s.vocab, 15.0));
      auto grads = torch::autograd::grad({loss}, {x, w}, {mean ? at::ones_like(loss) : dloss.to(loss.scalar_type())});
      out.insert(out.end(), {loss, grads[0], grads[1]});
    }
  }
  return out;
}
const bool linear_softcap_ce_check_registered = kernels_register_check({"linear_softcap_ce", linear_softcap_ce_check});

// the one-pass CUDA kernel of the training mean (CUDA only: the CPU's mean is one pass already)
// against the reference, at the check's shapes: d24's vocab of 32768 on 1024 rows, and a
// padded vocab of 80 with 72 counted
std::vector<Tensor> linear_softcap_ce_one_pass_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!device.is_cuda() || dtype == at::kHalf) return {};  // fp16 keeps the recompute path
  std::vector<Tensor> out;
  for (auto [rows, width, padded, vocab] :
       {std::array<int64_t, 4>{48, 32, 80, 72}, std::array<int64_t, 4>{1024, d24::n_embd, d24::vocab, d24::vocab}}) {
    auto gen = kernels_check_generator(device, 4);
    Tensor x = at::randn({rows, width}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor w = (at::randn({padded, width}, gen, at::device(device)) * (0.5 * std::sqrt(32.0 / (double)width)))
                   .requires_grad_();
    Tensor targets = at::randint(0, vocab, {rows}, gen, at::device(device).dtype(at::kLong))
                         .index_fill_(0, at::tensor(std::vector<int64_t>{1, rows - 2}).to(device), -1);
    Tensor loss = fused ? fused_mean(x, w, targets, vocab, 15.0, 512, /*one_pass=*/true)
                        : kernels_linear_softcap_ce_mean_reference(x, w, targets, vocab, 15.0);
    auto grads = torch::autograd::grad({loss}, {x, w});
    out.insert(out.end(), {loss, grads[0], grads[1]});
  }
  return out;
}
const bool linear_softcap_ce_one_pass_check_registered = kernels_register_check(
    {"linear_softcap_ce_one_pass", linear_softcap_ce_one_pass_check, nullptr, /*cuda_without_nvcc=*/false,
     /*part_of=*/"linear_softcap_ce"});

}  // namespace

}  // namespace nanochat
