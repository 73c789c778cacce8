// vnnipeak.c: the int8 compute ceiling (see vnnipeak.h). Sixteen accumulators
// are independent dependency chains, more than the VNNI latency times its
// issue rate, so the loop runs at the instruction's throughput.

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

long long
pyllm_vnni_peak(long long iters, int chunks)
{
  if (!pyllm_use_avx512())
    return -1;
  struct peak_job j = { iters, 0 };
  pool_run(peak_chunk, &j, chunks);
  return j.sum & 0x7fffffffffffffffLL;  // >= 0: -1 means "no VNNI"
}
