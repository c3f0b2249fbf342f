// MKL's entry points are looked up at run time: libtorch_cpu exports them when it was built
// with MKL (the x86 wheels), and a build without them still links and takes ATen's path.
#include "cpu_gemm.h"

#include <dlfcn.h>

#include <climits>

namespace nanochat {
namespace {

// Fortran sgemm (column-major) and MKL's CBLAS bf16 GEMM (LP64: 32-bit ints)
using sgemm_fn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                          const int*, const float*, const int*, const float*, float*, const int*);
using bf16_gemm_fn = void (*)(int, int, int, int, int, int, float, const c10::BFloat16*, int, const c10::BFloat16*, int,
                              float, float*, int);
enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };  // CBLAS's enum values

template <typename F>
F lookup(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

sgemm_fn mkl_sgemm() {
  static const sgemm_fn f = lookup<sgemm_fn>("sgemm_");
  return f;
}

bf16_gemm_fn mkl_bf16_gemm() {
  static const bf16_gemm_fn f = lookup<bf16_gemm_fn>("cblas_gemm_bf16bf16f32");
  return f;
}

bool fits_int(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (v < 0 || v > INT_MAX) return false;
  return true;
}

}  // namespace

bool cpu_gemm_f32_available(c10::ScalarType operands) {
  if (operands == c10::kFloat) return mkl_sgemm() != nullptr;
  if (operands == c10::kBFloat16) return mkl_bf16_gemm() != nullptr;
  return false;
}

bool cpu_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const sgemm_fn sgemm = mkl_sgemm();
  if (!sgemm || !fits_int(M, N, K, lda, ldb, ldc)) return false;
  // row-major C is column-major C^T = op(B)^T op(A)^T: the operands swap, the flags stay
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  const int m = (int)N, n = (int)M, k = (int)K, la = (int)ldb, lb = (int)lda, lc = (int)ldc;
  sgemm(&ta, &tb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  return true;
}

bool cpu_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const c10::BFloat16* A,
                  int64_t lda, const c10::BFloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const bf16_gemm_fn gemm = mkl_bf16_gemm();
  if (!gemm || !fits_int(M, N, K, lda, ldb, ldc)) return false;
  gemm(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
       B, (int)ldb, beta, C, (int)ldc);
  return true;
}

}  // namespace nanochat
