// The CPU kernel of linear_softcap_ce.cpp: the softcapped cross-entropy of one chunk of logits
// rows, one pass per row through fp32 scratch (a row of even a 65536 vocab stays in L2),
// split over rows with at::parallel_for and vectorised with at::vec.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

// tanh(u) = 1 - 2 / (exp(2u) + 1) through at::vec's fast exp (exp_u20, the one inductor's
// softmax uses: ~1e-6 relative): one cheap exp instead of Sleef's tanh, and exp(2u) -> inf
// or 0 gives exactly +-1. The CUDA kernel computes it the same way.
template <typename V>
V fast_tanh(V u) {
  return V(1) - V(2) / ((u + u).exp_u20() + V(1));
}

// One row of the softcapped cross-entropy, l its logits as acc_t (the first `vocab` count).
// z = cap*tanh(l/cap) lies in [-cap, cap], so exp(z) cannot overflow for any sane cap: the
// log-sum-exp needs no running max, and the row is read once.
template <typename acc>
acc row_lse(const acc* l, int64_t vocab, acc c, acc inv_c) {
  using V = Vectorized<acc>;
  V vsum(0);
  int64_t j = 0;
  for (; j + V::size() <= vocab; j += V::size()) vsum += (fast_tanh(V::loadu(l + j) * V(inv_c)) * V(c)).exp_u20();
  acc sum = at::vec::vec_reduce_all<acc>([](V a, V b) { return a + b; }, vsum);
  for (; j < vocab; j++) sum += std::exp(c * std::tanh(l[j] * inv_c));
  return std::log(sum);
}

// d loss / d l for the row's gradient g into out[0, ld): g * (softmax(z) - onehot(t)) * (1 - tanh^2),
// 0 in the padded columns
template <typename acc>
void row_grad(const acc* l, int64_t vocab, int64_t ld, int64_t t, acc lse, acc g, acc c, acc inv_c, acc* out) {
  using V = Vectorized<acc>;
  const V vg(g), vlse(lse), vc(c), vinv(inv_c), one(1);
  int64_t j = 0;
  for (; j + V::size() <= vocab; j += V::size()) {
    V th = fast_tanh(V::loadu(l + j) * vinv);
    V p = (th * vc - vlse).exp_u20();
    (vg * p * (one - th * th)).store(out + j);
  }
  for (; j < vocab; j++) {
    acc th = std::tanh(l[j] * inv_c);
    out[j] = g * std::exp(th * c - lse) * (1 - th * th);
  }
  const acc tht = std::tanh(l[t] * inv_c);
  out[t] -= g * (1 - tht * tht);
  std::fill(out + vocab, out + ld, acc(0));
}

// forward and backward of one row at once, for a gradient known up front: the first sweep
// keeps tanh(l/c) in `out` and exp(z) in `e` while it sums, the second only multiplies --
// one tanh and one exp an element instead of two of each. Returns the log-sum-exp.
template <typename acc>
acc row_lse_and_grad(const acc* l, int64_t vocab, int64_t ld, int64_t t, acc g, acc c, acc inv_c, acc* e, acc* out) {
  using V = Vectorized<acc>;
  V vsum(0);
  int64_t j = 0;
  for (; j + V::size() <= vocab; j += V::size()) {
    V th = fast_tanh(V::loadu(l + j) * V(inv_c)), ez = (th * V(c)).exp_u20();
    th.store(out + j);
    ez.store(e + j);
    vsum += ez;
  }
  acc sum = at::vec::vec_reduce_all<acc>([](V a, V b) { return a + b; }, vsum);
  for (; j < vocab; j++) {
    out[j] = std::tanh(l[j] * inv_c);
    e[j] = std::exp(c * out[j]);
    sum += e[j];
  }
  const acc lse = std::log(sum), gp = g / sum;  // g * softmax = g * exp(z) / sum
  const acc tht = out[t];
  j = 0;
  for (; j + V::size() <= vocab; j += V::size()) {
    V th = V::loadu(out + j);
    (V(gp) * V::loadu(e + j) * (V(1) - th * th)).store(out + j);
  }
  for (; j < vocab; j++) out[j] = gp * e[j] * (1 - out[j] * out[j]);
  out[t] -= g * (1 - tht * tht);
  std::fill(out + vocab, out + ld, acc(0));
  return lse;
}

// -1 is the ignore index (as the reference's cross_entropy); any other target must be a token
void check_target(int64_t t, int64_t vocab) {
  if (t < -1 || t >= vocab)
    fail("cross-entropy: target %lld is outside the vocab of %lld (-1 marks an ignored position)", (long long)t,
         (long long)vocab);
}

// the row loop of the three entry points below: forward (loss, lse), backward (logits become
// their gradient for grad_loss), or both while the row is in cache (grad_loss then known
// up front, as for a mean loss)
void softcap_ce_rows(at::Tensor& logits, const at::Tensor& targets, int64_t vocab, double cap, at::Tensor* loss,
                     at::Tensor* lse, const at::Tensor* lse_in, const at::Tensor* grad_loss) {
  const int64_t n = logits.size(0), ld = logits.size(1);
  check_rows(logits, n, "softcap_ce");
  check_rows(targets, n, "softcap_ce targets");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, logits.scalar_type(), "softcap_ce", [&] {
    using acc = acc_t<scalar_t>;
    scalar_t* L = logits.data_ptr<scalar_t>();
    const int64_t* tg = targets.data_ptr<int64_t>();
    acc* out_loss = loss ? loss->data_ptr<acc>() : nullptr;
    acc* out_lse = lse ? lse->data_ptr<acc>() : nullptr;
    const acc* in_lse = lse_in ? lse_in->data_ptr<acc>() : nullptr;
    const acc* grad = grad_loss ? grad_loss->data_ptr<acc>() : nullptr;
    const acc c = (acc)cap, inv_c = (acc)(1.0 / cap);
    const bool at_once = grad && !in_lse;  // forward and backward in one visit of the row
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      std::vector<acc> scratch, out(grad ? ld : 0), e(at_once ? vocab : 0);
      for (int64_t i = begin; i < end; i++) {
        scalar_t* row = L + i * ld;
        const int64_t t = tg[i];
        check_target(t, vocab);
        const acc* l = row_as_acc(row, vocab, scratch);
        if (at_once && t != -1) {
          const acc lse_value = row_lse_and_grad(l, vocab, ld, t, grad[i], c, inv_c, e.data(), out.data());
          out_lse[i] = lse_value;
          out_loss[i] = lse_value - c * std::tanh(l[t] * inv_c);
          store_row<scalar_t>(out.data(), row, ld);
          continue;
        }
        const acc row_lse_value = in_lse ? in_lse[i] : row_lse(l, vocab, c, inv_c);
        if (out_lse) out_lse[i] = row_lse_value;
        if (out_loss) out_loss[i] = t == -1 ? acc(0) : row_lse_value - c * std::tanh(l[t] * inv_c);
        if (!grad) continue;
        if (t == -1) {  // an ignored position contributes nothing
          std::fill(row, row + ld, scalar_t(0));
          continue;
        }
        row_grad(l, vocab, ld, t, row_lse_value, grad[i], c, inv_c, out.data());
        store_row<scalar_t>(out.data(), row, ld);
      }
    });
  });
}

}  // namespace

void softcap_ce_forward_cpu(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab, double cap,
                            at::Tensor& loss, at::Tensor& lse) {
  at::Tensor l = logits;  // read only: no gradient is asked for
  softcap_ce_rows(l, targets, vocab, cap, &loss, &lse, nullptr, nullptr);
}

void softcap_ce_backward_cpu(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                             const at::Tensor& grad_loss, int64_t vocab, double cap) {
  softcap_ce_rows(logits, targets, vocab, cap, nullptr, nullptr, &lse, &grad_loss);
}

void softcap_ce_forward_backward_cpu(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& grad_loss,
                                     int64_t vocab, double cap, at::Tensor& loss, at::Tensor& lse) {
  softcap_ce_rows(logits, targets, vocab, cap, &loss, &lse, nullptr, &grad_loss);
}

}  // namespace nanochat
