// One core's peak multiply-add rate on AVX-512, for the ceiling of batching: 16 rows of a decode
// step cost 16 rows of multiply-adds, so how much 16 chats together can gain over one at a time is
// bounded by this rate against the bytes one row's step reads. Twelve independent accumulators
// (more than any latency x throughput of these instructions) of fp32 FMA (16 products an
// instruction), bf16 pairs (vdpbf16ps, 32) and u8 x s8 quads (vpdpbusd, 64); NAN where the CPU
// lacks the instruction.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "../bench_util.h"

namespace peak_macs {

constexpr int kAcc = 12;
constexpr long kIters = 20'000'000;

__attribute__((target("avx512f"))) inline double fp32_fma() {
  if (!__builtin_cpu_supports("avx512f")) return NAN;
  __m512 acc[kAcc], a = _mm512_set1_ps(1e-9f), b = _mm512_set1_ps(1.f);
  for (__m512& v : acc) v = _mm512_setzero_ps();
  const auto t0 = nanochat::bench_clock::now();
  for (long i = 0; i < kIters; i++) {
#pragma GCC unroll 12  // the accumulators then live in registers, not in memory
    for (__m512& v : acc) v = _mm512_fmadd_ps(a, b, v);
    __asm__ volatile("" : "+v"(a));  // a fresh operand each round: the loop is not folded
  }
  const double r = (double)kIters * kAcc * 16 / nanochat::bench_seconds_since(t0);
  __m512 all = _mm512_setzero_ps();  // every sum is used: none of the chains is dropped
  for (const __m512& v : acc) all = _mm512_add_ps(all, v);
  volatile float sink = _mm512_cvtss_f32(all);
  (void)sink;
  return r;
}

__attribute__((target("avx512f,avx512bf16"))) inline double bf16_pairs() {
  if (!__builtin_cpu_supports("avx512bf16")) return NAN;
  __m512 acc[kAcc];
  __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = a;  // bf16 1.0
  for (__m512& v : acc) v = _mm512_setzero_ps();
  const auto t0 = nanochat::bench_clock::now();
  for (long i = 0; i < kIters; i++) {
#pragma GCC unroll 12  // the accumulators then live in registers, not in memory
    for (__m512& v : acc) v = _mm512_dpbf16_ps(v, a, b);
    __asm__ volatile("" : "+v"(a));
  }
  const double r = (double)kIters * kAcc * 32 / nanochat::bench_seconds_since(t0);
  __m512 all = _mm512_setzero_ps();  // every sum is used: none of the chains is dropped
  for (const __m512& v : acc) all = _mm512_add_ps(all, v);
  volatile float sink = _mm512_cvtss_f32(all);
  (void)sink;
  return r;
}

__attribute__((target("avx512f,avx512vnni"))) inline double int8_quads() {
  if (!__builtin_cpu_supports("avx512vnni")) return NAN;
  __m512i acc[kAcc], a = _mm512_set1_epi8(1), b = a;
  for (__m512i& v : acc) v = _mm512_setzero_si512();
  const auto t0 = nanochat::bench_clock::now();
  for (long i = 0; i < kIters; i++) {
#pragma GCC unroll 12  // the accumulators then live in registers, not in memory
    for (__m512i& v : acc) v = _mm512_dpbusd_epi32(v, a, b);
    __asm__ volatile("" : "+v"(a));
  }
  const double r = (double)kIters * kAcc * 64 / nanochat::bench_seconds_since(t0);
  __m512i all = _mm512_setzero_si512();
  for (const __m512i& v : acc) all = _mm512_add_epi32(all, v);
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, all);
  volatile int sink = lanes[0];
  (void)sink;
  return r;
}

}  // namespace peak_macs
