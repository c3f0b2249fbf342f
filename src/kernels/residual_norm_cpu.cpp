// The CPU kernel of residual_norm.cpp: h = a*x + b*y and rms_norm(h), one row at a time.
#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

template <typename T>
const acc_t<T>* scalar_ptr(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<acc_t<T>>() : nullptr;
}

}  // namespace

// Each row goes through fp32 scratch rows (as the other kernels): convert, the products and
// the sum each rounded back through T as the eager ops round them, then the norm.
// Returns (h, n, rstd).
std::tuple<at::Tensor, at::Tensor, at::Tensor> residual_norm_forward_cpu(const at::Tensor& x, const at::Tensor& y,
                                                                         const at::Tensor& a, const at::Tensor& b,
                                                                         double eps) {
  const int64_t R = x.size(0), D = x.size(1);
  check_rows(y, R, "residual_norm_forward_cpu: y");
  at::Tensor h = at::empty_like(x), n = at::empty_like(x),
             rstd = at::empty({R}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "residual_norm_forward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t *X = x.data_ptr<scalar_t>(), *Y = y.data_ptr<scalar_t>();
    const acc *A = scalar_ptr<scalar_t>(a), *B = scalar_ptr<scalar_t>(b);
    scalar_t *H = h.data_ptr<scalar_t>(), *N = n.data_ptr<scalar_t>();
    acc* RSTD = rstd.data_ptr<acc>();
    at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
      std::vector<acc> xs(D), ys(D), hs(D);
      std::vector<scalar_t> rounding;
      for (int64_t i = begin; i < end; i++) {
        const acc* xr = row_as_acc(X + i * D, D, xs);
        const acc* yr = row_as_acc(Y + i * D, D, ys);
        if (A) {  // a*x, rounded
          for (int64_t j = 0; j < D; j++) xs[j] = *A * xr[j];
          round_row<scalar_t>(xs.data(), D, rounding);
          xr = xs.data();
        }
        if (B) {  // b*y, rounded
          for (int64_t j = 0; j < D; j++) ys[j] = *B * yr[j];
          round_row<scalar_t>(ys.data(), D, rounding);
          yr = ys.data();
        }
        for (int64_t j = 0; j < D; j++) hs[j] = xr[j] + yr[j];
        round_row<scalar_t>(hs.data(), D, rounding);  // h as stored
        const acc rstd = acc(1) / std::sqrt(dot_row(hs.data(), hs.data(), D) / (acc)D + (acc)eps);
        RSTD[i] = rstd;
        store_row<scalar_t>(hs.data(), H + i * D, D);
        for (int64_t j = 0; j < D; j++) hs[j] *= rstd;
        store_row<scalar_t>(hs.data(), N + i * D, D);
      }
    });
  });
  return {h, n, rstd};
}

// Returns (dx, dy, ga_rows, gb_rows).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> residual_norm_backward_cpu(
    const at::Tensor& dh, const at::Tensor& dn, const at::Tensor& h, const at::Tensor& rstd, const at::Tensor& x,
    const at::Tensor& y, const at::Tensor& a, const at::Tensor& b) {
  const int64_t R = h.size(0), D = h.size(1);
  check_rows(dh, R, "residual_norm_backward_cpu: dh");
  check_rows(dn, R, "residual_norm_backward_cpu: dn");
  const auto acc_options = h.options().dtype(h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  at::Tensor dx = at::empty_like(h), ga_rows, gb_rows;
  at::Tensor dy = a.defined() || b.defined() ? at::empty_like(h) : dx;  // one gradient serves both
  if (a.defined()) ga_rows = at::empty({R}, acc_options);
  if (b.defined()) gb_rows = at::empty({R}, acc_options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "residual_norm_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t *DH = dh.data_ptr<scalar_t>(), *DN = dn.data_ptr<scalar_t>(), *H = h.data_ptr<scalar_t>();
    const scalar_t* X = a.defined() ? x.data_ptr<scalar_t>() : nullptr;
    const scalar_t* Y = b.defined() ? y.data_ptr<scalar_t>() : nullptr;
    const acc *A = scalar_ptr<scalar_t>(a), *B = scalar_ptr<scalar_t>(b), *RSTD = rstd.data_ptr<acc>();
    scalar_t *DX = dx.data_ptr<scalar_t>(), *DY = dy.data_ptr<scalar_t>();
    acc* GA = a.defined() ? ga_rows.data_ptr<acc>() : nullptr;
    acc* GB = b.defined() ? gb_rows.data_ptr<acc>() : nullptr;
    at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
      std::vector<acc> s_dh(D), s_dn(D), s_h(D), s_in(D), gr(D), out(D);
      for (int64_t i = begin; i < end; i++) {
        const acc r = RSTD[i];
        const acc* dhr = row_as_acc(DH + i * D, D, s_dh);
        const acc* dnr = row_as_acc(DN + i * D, D, s_dn);
        const acc* hr = row_as_acc(H + i * D, D, s_h);
        const acc dot = r * dot_row(dnr, hr, D) / (acc)D;  // mean(dn * nh), nh = h * rstd
        for (int64_t j = 0; j < D; j++) gr[j] = dhr[j] + r * (dnr[j] - hr[j] * r * dot);
        if (A) {
          for (int64_t j = 0; j < D; j++) out[j] = *A * gr[j];
          store_row<scalar_t>(out.data(), DX + i * D, D);
          GA[i] = dot_row(gr.data(), row_as_acc(X + i * D, D, s_in), D);
        } else {
          store_row<scalar_t>(gr.data(), DX + i * D, D);
        }
        if (B) {
          for (int64_t j = 0; j < D; j++) out[j] = *B * gr[j];
          store_row<scalar_t>(out.data(), DY + i * D, D);
          GB[i] = dot_row(gr.data(), row_as_acc(Y + i * D, D, s_in), D);
        } else if (A) {
          store_row<scalar_t>(gr.data(), DY + i * D, D);
        }
      }
    });
  });
  return {dx, dy, ga_rows, gb_rows};
}

}  // namespace nanochat
