// GEMMs with an fp32 result straight from MKL, the BLAS inside the torch wheel's libtorch_cpu:
// bf16 x bf16 -> fp32 (ATen's CPU addmm cannot write fp32 from bf16 inputs) and fp32, with
// beta for accumulation and either operand transposed, on raw strided pointers (no dispatch
// per call: attention runs thousands of small ones a step).
#pragma once
#include <cstdint>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>

namespace nanochat {

// whether the LibTorch loaded has the GEMM below for operands of this dtype (float, bfloat16)
bool cpu_gemm_f32_available(c10::ScalarType operands);

// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C, op(A) (M, K) and op(B) (K, N). A is
// stored (M, K) with row stride lda, or (K, M) when trans_a; likewise B. Returns false, doing
// nothing, when the LibTorch loaded has no MKL (the caller then uses ATen).
bool cpu_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
bool cpu_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const c10::BFloat16* A,
                  int64_t lda, const c10::BFloat16* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace nanochat
