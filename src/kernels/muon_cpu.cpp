// The CPU passes of the fused Muon step (contracts in muon.cpp), one matrix a call,
// split over rows (or, for column sums, over column blocks) with at::parallel_for and
// vectorised with at::vec. Compiled for AVX2+FMA as every *_cpu.cpp (CMakeLists.txt).
// T is the params' dtype (float, or double for the tests' fp64 checks), XT Polar Express's
// (T itself, or bf16 for float params); every sum is accumulated in T.
#include <cmath>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

// lerp as ATen's vectorised kernel computes it: fma(w, b-a, a) for w < 0.5, else fma(w-1, b-a, b)
template <typename V, typename S>
V lerp_vec(V a, V b, S w) {
  return w < S(0.5) ? at::vec::fmadd(V(w), b - a, a) : at::vec::fmadd(V(w - S(1)), b - a, b);
}
template <typename S>
S lerp_one(S a, S b, S w) {
  return w < S(0.5) ? std::fma(w, b - a, a) : std::fma(w - S(1), b - a, b);
}

// call f(T{}, XT{}) for the dtype pairs the fused step takes
template <typename F>
void with_muon_dtypes(const at::Tensor& p, const at::Tensor& X, const char* where, F f) {
  const auto pt = p.scalar_type(), xt = X.scalar_type();
  if (pt == at::kFloat && xt == at::kFloat) f(float{}, float{});
  else if (pt == at::kFloat && xt == at::kBFloat16) f(float{}, at::BFloat16{});
  else if (pt == at::kDouble && xt == at::kDouble) f(double{}, double{});
  else
    fail("%s: float32 params with float32 or bfloat16 X, or float64 with float64, not %s with %s", where,
         c10::toString(pt), c10::toString(xt));
}

void check_matrix(const at::Tensor& t, int64_t rows, int64_t cols, const char* name, const char* where) {
  if (!t.is_cpu() || !t.is_contiguous() || t.numel() != rows * cols)
    fail("%s: %s must be a contiguous CPU tensor of %lld x %lld", where, name, (long long)rows, (long long)cols);
}

void check_vector(const at::Tensor& t, int64_t n, at::ScalarType dtype, const char* name, const char* where) {
  if (!t.is_cpu() || !t.is_contiguous() || t.numel() != n || t.scalar_type() != dtype)
    fail("%s: %s must be a contiguous CPU %s vector of %lld", where, name, c10::toString(dtype), (long long)n);
}

}  // namespace

void muon_nesterov_cpu(const at::Tensor& grad, at::Tensor& buf, at::Tensor& X, at::Tensor& row_sumsq, double mu) {
  const char* where = "muon_nesterov_cpu";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  for (auto [t, name] : {std::pair<const at::Tensor*, const char*>{&grad, "grad"}, {&buf, "buf"}, {&X, "X"}})
    check_matrix(*t, rows, cols, name, where);
  if (grad.scalar_type() != buf.scalar_type()) fail("%s: grad and buf differ in dtype", where);
  check_vector(row_sumsq, rows, grad.scalar_type(), "row_sumsq", where);
  with_muon_dtypes(grad, X, where, [&](auto t_tag, auto x_tag) {
    using T = decltype(t_tag);
    using XT = decltype(x_tag);
    using V = at::vec::Vectorized<T>;
    const T m = (T)mu, w = T(1) - m;
    const T* G = grad.data_ptr<T>();
    T* B = buf.data_ptr<T>();
    XT* Xp = X.data_ptr<XT>();
    T* SS = row_sumsq.data_ptr<T>();
    at::parallel_for(0, rows, 4, [&](int64_t r0, int64_t r1) {
      std::vector<T> scratch(std::is_same_v<XT, T> ? 0 : cols);
      for (int64_t r = r0; r < r1; r++) {
        const T* g = G + r * cols;
        T* b = B + r * cols;
        T* x;  // the Nesterov gradient, written straight into X when X is of T
        if constexpr (std::is_same_v<XT, T>) x = Xp + r * cols;
        else x = scratch.data();
        int64_t j = 0;
        for (; j + V::size() <= cols; j += V::size()) {
          V gv = V::loadu(g + j), bv = lerp_vec(V::loadu(b + j), gv, w);
          bv.store(b + j);
          lerp_vec(gv, bv, m).store(x + j);
        }
        for (; j < cols; j++) {
          b[j] = lerp_one(b[j], g[j], w);
          x[j] = lerp_one(g[j], b[j], m);
        }
        if constexpr (!std::is_same_v<XT, T>) {  // the norms are those of the rounded values
          from_float(x, Xp + r * cols, cols);
          to_float(Xp + r * cols, x, cols);
        }
        SS[r] = dot_row(x, x, cols);
      }
    });
  });
}

void muon_scale_rows_cpu(at::Tensor& X, const at::Tensor& scale) {
  const char* where = "muon_scale_rows_cpu";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  check_matrix(X, rows, cols, "X", where);
  const at::ScalarType acc = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  check_vector(scale, rows, acc, "scale", where);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, X.scalar_type(), "muon_cpu", [&] {
    using A = acc_t<scalar_t>;
    using V = at::vec::Vectorized<A>;
    scalar_t* Xp = X.data_ptr<scalar_t>();
    const A* S = scale.data_ptr<A>();
    at::parallel_for(0, rows, 4, [&](int64_t r0, int64_t r1) {
      std::vector<A> scratch;
      for (int64_t r = r0; r < r1; r++) {
        A* x = const_cast<A*>(row_as_acc(Xp + r * cols, cols, scratch));  // X's row itself when of A
        int64_t j = 0;
        for (; j + V::size() <= cols; j += V::size()) (V::loadu(x + j) * V(S[r])).store(x + j);
        for (; j < cols; j++) x[j] *= S[r];
        store_row<scalar_t>(x, Xp + r * cols, cols);
      }
    });
  });
}

void muon_sumsq_cpu(const at::Tensor& X, bool by_row, at::Tensor& out) {
  const char* where = "muon_sumsq_cpu";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  check_matrix(X, rows, cols, "X", where);
  const at::ScalarType acc = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  check_vector(out, by_row ? rows : cols, acc, "out", where);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, X.scalar_type(), "muon_cpu", [&] {
    using A = acc_t<scalar_t>;
    using V = at::vec::Vectorized<A>;
    const scalar_t* Xp = X.data_ptr<scalar_t>();
    A* O = out.data_ptr<A>();
    if (by_row) {
      at::parallel_for(0, rows, 4, [&](int64_t r0, int64_t r1) {
        std::vector<A> scratch;
        for (int64_t r = r0; r < r1; r++) {
          const A* x = row_as_acc(Xp + r * cols, cols, scratch);
          O[r] = dot_row(x, x, cols);
        }
      });
      return;
    }
    // columns: each task owns a block of columns and walks every row's segment of it
    at::parallel_for(0, cols, 64, [&](int64_t c0, int64_t c1) {
      const int64_t n = c1 - c0;
      std::vector<A> scratch, sums(n, A(0));
      for (int64_t r = 0; r < rows; r++) {
        const A* x = row_as_acc(Xp + r * cols + c0, n, scratch);
        int64_t j = 0;
        for (; j + V::size() <= n; j += V::size()) {
          V xv = V::loadu(x + j);
          at::vec::fmadd(xv, xv, V::loadu(sums.data() + j)).store(sums.data() + j);
        }
        for (; j < n; j++) sums[j] += x[j] * x[j];
      }
      std::copy(sums.begin(), sums.end(), O + c0);
    });
  });
}

void muon_update_cpu(const at::Tensor& X, at::Tensor& p, const at::Tensor& line_scale, bool by_row, double lr,
                     double lr_wd) {
  const char* where = "muon_update_cpu";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  check_matrix(X, rows, cols, "X", where);
  check_matrix(p, rows, cols, "p", where);
  check_vector(line_scale, by_row ? rows : cols, p.scalar_type(), "line_scale", where);
  with_muon_dtypes(p, X, where, [&](auto t_tag, auto x_tag) {
    using T = decltype(t_tag);
    using XT = decltype(x_tag);
    using V = at::vec::Vectorized<T>;
    const XT* Xp = X.data_ptr<XT>();
    T* P = p.data_ptr<T>();
    const T* LS = line_scale.data_ptr<T>();
    const T lr_t = (T)lr, lr_wd_t = (T)lr_wd;
    // the reference's p - (g*lr + p*lr_wd*mask), the mask where the update and the param agree in sign
    auto step = [&](V g, V pv) {
      V decay = V::blendv(V(T(0)), pv * V(lr_wd_t), (g * pv) >= V(T(0)));
      return pv - (g * V(lr_t) + decay);
    };
    auto step_one = [&](T g, T pv) { return pv - (g * lr_t + (g * pv >= T(0) ? pv * lr_wd_t : T(0))); };
    at::parallel_for(0, rows, 4, [&](int64_t r0, int64_t r1) {
      std::vector<T> scratch;
      for (int64_t r = r0; r < r1; r++) {
        const T* x = row_as_acc(Xp + r * cols, cols, scratch);
        T* pr = P + r * cols;
        int64_t j = 0;
        if (by_row) {
          const T s = LS[r];
          for (; j + V::size() <= cols; j += V::size()) step(V::loadu(x + j) * V(s), V::loadu(pr + j)).store(pr + j);
          for (; j < cols; j++) pr[j] = step_one(x[j] * s, pr[j]);
        } else {
          for (; j + V::size() <= cols; j += V::size())
            step(V::loadu(x + j) * V::loadu(LS + j), V::loadu(pr + j)).store(pr + j);
          for (; j < cols; j++) pr[j] = step_one(x[j] * LS[j], pr[j]);
        }
      }
    });
  });
}

}  // namespace nanochat
