// vnnipeak.c: the int8 compute ceilings (see vnnipeak.h). Sixteen accumulators
// are independent dependency chains, more than the VNNI latency times its
// issue rate, so the loop runs at the instruction's throughput.
//
// The epilogue variant is why an 8-row Q4X16 tile cannot reach the first
// ceiling: on this machine's cores (AMD EPYC, family 25) a 512-bit vpdpbusd,
// vfmadd231ps and vmulps all issue at one per cycle *together* (16 vpdpbusd
// took as long as 8 vpdpbusd + 8 vfmadd231ps), while vcvtdq2ps, vpaddd and
// broadcast loads go elsewhere. A token's 16 x 32 block costs 8 vpdpbusd and 3
// of those float operations: 11 issue cycles, so 8/11 of the peak at best.

#include <immintrin.h>

#include "kernels.h"
#include "pool.h"
#include "vnnipeak.h"

#define CHAINS 16

struct peak_job {
  long long iters;
  _Atomic long long sum;
};

static PYLLM_TARGET_AVX512 void
peak_chunk(void *arg, int c)
{
  struct peak_job *j = arg;
  __m512i acc[CHAINS];
  __m512i w = _mm512_set1_epi32(0x01020304 + c), x = _mm512_set1_epi32(0x05060708);
  for (int k = 0; k < CHAINS; k++)
    acc[k] = _mm512_set1_epi32(k);
  for (long long i = 0; i < j->iters; i++) {
#pragma GCC unroll 16
    for (int k = 0; k < CHAINS; k++)
      acc[k] = _mm512_dpbusd_epi32(acc[k], w, x);
    // w changes "unknowably" each round, so the products are not hoisted
    __asm__ volatile("" : "+v"(w));
  }
  long long s = 0;
  for (int k = 0; k < CHAINS; k++)
    s += _mm512_reduce_add_epi32(acc[k]);
  j->sum += s;
}

// 16 vpdpbusd per round, and two tokens' float epilogues (as in q4x16_tile: a
// product and two fused multiply-adds each). Written in assembly: with this
// many live vectors GCC spilled accumulators to the stack every round, and the
// stores, not the issue port, set the pace.
#define DP(i) "vpdpbusd %%zmm16, %%zmm17, %%zmm" #i "\n\t"
#define EPI(m, f1, f2)                                          \
  "vmulps %%zmm18, %%zmm" #m ", %%zmm" #m "\n\t"                 \
  "vfmadd132ps %%zmm18, %%zmm19, %%zmm" #f1 "\n\t"               \
  "vfmadd132ps %%zmm18, %%zmm19, %%zmm" #f2 "\n\t"
static PYLLM_TARGET_AVX512 void
peak_mix_chunk(void *arg, int c)
{
  struct peak_job *j = arg;
  int32_t sums[16];
  long long n = j->iters;
  const int32_t w = 0x01020304 + c, x = 0x05060708;
  const float one = 1.0f, quarter = 0.25f;  // the floats stay normal
  __asm__ volatile(
      "vpbroadcastd %[w], %%zmm16\n\t"
      "vpbroadcastd %[x], %%zmm17\n\t"
      "vbroadcastss %[one], %%zmm18\n\t"
      "vbroadcastss %[quarter], %%zmm19\n\t"
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vmovdqa32 %%zmm0, %%zmm1\n\t vmovdqa32 %%zmm0, %%zmm2\n\t vmovdqa32 %%zmm0, %%zmm3\n\t"
      "vmovdqa32 %%zmm0, %%zmm4\n\t vmovdqa32 %%zmm0, %%zmm5\n\t vmovdqa32 %%zmm0, %%zmm6\n\t"
      "vmovdqa32 %%zmm0, %%zmm7\n\t vmovdqa32 %%zmm0, %%zmm8\n\t vmovdqa32 %%zmm0, %%zmm9\n\t"
      "vmovdqa32 %%zmm0, %%zmm10\n\t vmovdqa32 %%zmm0, %%zmm11\n\t vmovdqa32 %%zmm0, %%zmm12\n\t"
      "vmovdqa32 %%zmm0, %%zmm13\n\t vmovdqa32 %%zmm0, %%zmm14\n\t vmovdqa32 %%zmm0, %%zmm15\n\t"
      "vmovaps %%zmm18, %%zmm20\n\t vmovaps %%zmm18, %%zmm21\n\t vmovaps %%zmm18, %%zmm22\n\t"
      "vmovaps %%zmm18, %%zmm23\n\t vmovaps %%zmm18, %%zmm24\n\t vmovaps %%zmm18, %%zmm25\n\t"
      "test %[n], %[n]\n\t"
      "jle 2f\n\t"
      "1:\n\t"
      DP(0) DP(1) DP(2) DP(3) EPI(20, 21, 22) DP(4) DP(5) DP(6) DP(7)
      DP(8) DP(9) DP(10) DP(11) EPI(23, 24, 25) DP(12) DP(13) DP(14) DP(15)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "vpaddd %%zmm1, %%zmm0, %%zmm0\n\t vpaddd %%zmm3, %%zmm2, %%zmm2\n\t"
      "vpaddd %%zmm5, %%zmm4, %%zmm4\n\t vpaddd %%zmm7, %%zmm6, %%zmm6\n\t"
      "vpaddd %%zmm9, %%zmm8, %%zmm8\n\t vpaddd %%zmm11, %%zmm10, %%zmm10\n\t"
      "vpaddd %%zmm13, %%zmm12, %%zmm12\n\t vpaddd %%zmm15, %%zmm14, %%zmm14\n\t"
      "vpaddd %%zmm2, %%zmm0, %%zmm0\n\t vpaddd %%zmm6, %%zmm4, %%zmm4\n\t"
      "vpaddd %%zmm10, %%zmm8, %%zmm8\n\t vpaddd %%zmm14, %%zmm12, %%zmm12\n\t"
      "vpaddd %%zmm4, %%zmm0, %%zmm0\n\t vpaddd %%zmm12, %%zmm8, %%zmm8\n\t"
      "vpaddd %%zmm8, %%zmm0, %%zmm0\n\t"
      "vaddps %%zmm21, %%zmm20, %%zmm20\n\t vaddps %%zmm22, %%zmm20, %%zmm20\n\t"
      "vaddps %%zmm23, %%zmm20, %%zmm20\n\t vaddps %%zmm24, %%zmm20, %%zmm20\n\t"
      "vaddps %%zmm25, %%zmm20, %%zmm20\n\t vcvttps2dq %%zmm20, %%zmm20\n\t"
      "vpaddd %%zmm20, %%zmm0, %%zmm0\n\t"
      "vmovdqu32 %%zmm0, %[out]\n\t"
      : [out] "=m"(sums), [n] "+r"(n)
      : [w] "m"(w), [x] "m"(x), [one] "m"(one), [quarter] "m"(quarter)
      : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9",
        "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16", "zmm17", "zmm18",
        "zmm19", "zmm20", "zmm21", "zmm22", "zmm23", "zmm24", "zmm25", "cc");
  long long s = 0;
  for (int k = 0; k < 16; k++)
    s += sums[k];
  j->sum += s;
}

long long
pyllm_vnni_peak(long long iters, int chunks, int epilogue)
{
  if (!pyllm_use_avx512())
    return -1;
  struct peak_job j = { iters, 0 };
  pool_run(epilogue ? peak_mix_chunk : peak_chunk, &j, chunks);
  return j.sum & 0x7fffffffffffffffLL;  // >= 0: -1 means "no VNNI"
}
