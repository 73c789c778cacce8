// vmath.h: small vector helpers of the AVX-512 paths: exp (softmax, SiLU) and
// the int8 dot product with a broadcast operand (the matmuls).

#ifndef PYLLM_VMATH_H
#define PYLLM_VMATH_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels.h"

// e^x for 16 floats, relative error ~2e-7 (Cody-Waite range reduction,
// degree-6 polynomial, exponent applied with scalef). x <= -88 gives ~0.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512
vexp512(__m512 x)
{
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-88.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-06f), r);
  __m512 p = _mm512_set1_ps(1.38888889e-03f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-02f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// acc + w . (the 4 activation bytes at p, in every lane): vpdpbusd with the
// broadcast as its own memory operand ({1to16}). GCC does not fold
// _mm512_set1_epi32 into vpdpbusd, and the separate vpbroadcastd it emits
// instead slows the batched decode step, where the products are bound by
// compute (the 1-sequence step, bound by memory, does not notice).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512i
dp_bcast(__m512i acc, __m512i w, const int8_t *p)
{
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
  return acc;
}

// acc + w . (the 2 int16 at p, in every lane): vpdpwssd with a broadcast
// memory operand, as dp_bcast.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512i
dpw_bcast(__m512i acc, __m512i w, const int16_t *p)
{
  __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
  return acc;
}

// A 32-column block of 16 rows against one token's int8 activations xq: the
// rows' weights for columns 0-15 in w[0..3] and 16-31 in w[4..7] (4 columns a
// vector, 4 bytes a row), summed into *lo and *hi. Two chains of dependent
// vpdpbusd, interleaved, so the next starts before the last one's latency.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
dp_block(const __m512i *w, const int8_t *xq, __m512i *lo, __m512i *hi)
{
  __m512i a0 = dp_bcast(_mm512_setzero_si512(), w[0], xq);
  __m512i a1 = dp_bcast(_mm512_setzero_si512(), w[4], xq + 16);
  a0 = dp_bcast(a0, w[1], xq + 4);
  a1 = dp_bcast(a1, w[5], xq + 20);
  a0 = dp_bcast(a0, w[2], xq + 8);
  a1 = dp_bcast(a1, w[6], xq + 24);
  a0 = dp_bcast(a0, w[3], xq + 12);
  a1 = dp_bcast(a1, w[7], xq + 28);
  *lo = a0;
  *hi = a1;
}

// The 16 rows x 32 columns of 4-bit weights at q (256 bytes: 4 columns a
// 64-byte vector, low nibbles columns 0-15, high nibbles 16-31) as bytes in
// w[0..7], the layout dp_block takes.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
nib_unpack(const uint8_t *q, __m512i *w)
{
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int c = 0; c < 4; c++) {
    __m512i v = _mm512_load_si512(q + 64 * c);
    w[c] = _mm512_and_si512(v, low);
    w[4 + c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
  }
}

#endif
