// The CPU kernel of rotary_norm.cpp: rotary then RMSNorm, one row at a time.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {

// Rows of D = 2*half channels; row r sits at position (r / H) % T of the (B,T,H,D) tensor.
std::pair<at::Tensor, at::Tensor> rotary_norm_forward_cpu(const at::Tensor& x, const at::Tensor& cos,
                                                          const at::Tensor& sin, int64_t T, int64_t H, double scale,
                                                          double eps) {
  const int64_t R = x.size(0), D = x.size(1), half = D / 2;
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty({R}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rotary_norm_forward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.data_ptr<scalar_t>();
    const scalar_t* C = cos.data_ptr<scalar_t>();
    const scalar_t* S = sin.data_ptr<scalar_t>();
    scalar_t* Y = y.data_ptr<scalar_t>();
    acc* out_rstd = rstd.data_ptr<acc>();
    // a row converted once, rotated over fp32 arrays (the loops vectorise), its sum of squares
    // and the stores vectorised: a decode step runs 2 x layers x rows x heads of these
    at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
      std::vector<acc> xs, cs, ss, r(D);
      for (int64_t i = begin; i < end; i++) {
        const int64_t pos = (i / H) % T;
        const acc* xr = row_as_acc(X + i * D, D, xs);
        const acc* c = row_as_acc(C + pos * half, half, cs);
        const acc* s = row_as_acc(S + pos * half, half, ss);
        for (int64_t j = 0; j < half; j++) {
          r[j] = xr[j] * c[j] + xr[j + half] * s[j];
          r[j + half] = -xr[j] * s[j] + xr[j + half] * c[j];
        }
        const acc inv = acc(1) / std::sqrt(dot_row(r.data(), r.data(), D) / (acc)D + (acc)eps);
        out_rstd[i] = inv;
        const acc k = (acc)scale * inv;
        for (int64_t j = 0; j < D; j++) r[j] *= k;
        store_row<scalar_t>(r.data(), Y + i * D, D);
      }
    });
  });
  return {y, rstd};
}

// n = y/scale (the normed row), dn = scale*dy: dr = rstd*(dn - n*mean(dn*n)), then the
// rotation transposed: dx1 = dr1*c - dr2*s, dx2 = dr1*s + dr2*c
at::Tensor rotary_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& y, const at::Tensor& rstd,
                                    const at::Tensor& cos, const at::Tensor& sin, int64_t T, int64_t H, double scale) {
  const int64_t R = y.size(0), D = y.size(1), half = D / 2;
  at::Tensor dx = at::empty_like(y);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, y.scalar_type(), "rotary_norm_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* DY = dy.data_ptr<scalar_t>();
    const scalar_t* Y = y.data_ptr<scalar_t>();
    const scalar_t* C = cos.data_ptr<scalar_t>();
    const scalar_t* S = sin.data_ptr<scalar_t>();
    const acc* in_rstd = rstd.data_ptr<acc>();
    scalar_t* DX = dx.data_ptr<scalar_t>();
    const acc sc = (acc)scale, inv_sc = acc(1) / (acc)scale;
    at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
      std::vector<acc> dn(D), nn(D);
      for (int64_t i = begin; i < end; i++) {
        acc dot = 0;
        for (int64_t j = 0; j < D; j++) {
          nn[j] = (acc)Y[i * D + j] * inv_sc;
          dn[j] = (acc)DY[i * D + j] * sc;
          dot += dn[j] * nn[j];
        }
        dot /= (acc)D;
        const acc inv = in_rstd[i];
        const int64_t pos = (i / H) % T;
        for (int64_t j = 0; j < half; j++) {
          const acc dr1 = inv * (dn[j] - nn[j] * dot), dr2 = inv * (dn[j + half] - nn[j + half] * dot);
          const acc c = C[pos * half + j], s = S[pos * half + j];
          DX[i * D + j] = scalar_t(dr1 * c - dr2 * s);
          DX[i * D + j + half] = scalar_t(dr1 * s + dr2 * c);
        }
      }
    });
  });
  return dx;
}

}  // namespace nanochat
