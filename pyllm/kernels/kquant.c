// kquant.c: llama.cpp's Q4_K and Q6_K super-blocks repacked into the 16-row
// records of kquant.h, and their products with int8 activations.
//
// Why native kernels and not a repack to Q8X16: a decode step streams every
// weight once, so its time follows the bytes. Q4_K is 4.5 bits a weight and
// Q6_K 6.56; as Q8X16 both would be 8.5 (docs/ARCHITECTURE.md has the
// measured steps). The records keep exactly the file's bits: the nibbles,
// the 6-bit scales (unpacked to bytes) and the f16 d/dmin, regrouped so one
// 64-byte load serves 16 rows.
//
// Per 32-column block b of token t the integer dot products are exact
// (vpdpbusd), then the block's scales apply:
//   Q4K16: out += isum * (d*sc) * dx - (dmin*m) * (dx * sum(xq))
//   Q6K16: out += (isum_lo - 32*half) * (d*sc_lo) * dx
//               + (isum_hi - 32*(sum(xq) - half)) * (d*sc_hi) * dx
// where half = sum of the block's first 16 xq (kq_half_sums).

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kquant.h"
#include "pool.h"
#include "vmath.h"

#define QK 32
#define QK_K 256
#define TILE 8
#define PF_BYTES 5120  // prefetch distance into the row group's stream (as Q4X16's)

// ------------------------------------------------------------ layout

long long
kq_group_bytes(int type, int cols)
{
  if (cols <= 0 || cols % QK_K)
    return -1;
  if (type == PYLLM_Q4K16)
    return (long long)(cols / QK_K) * PYLLM_Q4K16_RECORD;
  if (type == PYLLM_Q6K16)
    return (long long)(cols / QK_K) * PYLLM_Q6K16_RECORD;
  return -1;
}

// Q4_K/Q5_K's 6-bit scale and min of sub-block j from the 12 packed bytes.
static void
scale_min_k4(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The 4-bit value of column p (0..255) of a Q4_K block.
static inline int
q4k_nib(const uint8_t *blk, int p)
{
  uint8_t b = blk[16 + 32 * (p / 64) + p % 32];
  return (p % 64) < 32 ? b & 15 : b >> 4;
}

// The 6-bit value (0..63) of column p of a Q6_K block.
static inline int
q6k_val(const uint8_t *blk, int p)
{
  uint8_t l = blk[64 * (p / 128) + p % 64], h = blk[128 + 32 * (p / 128) + p % 32];
  int lo = (p % 128) < 64 ? l & 15 : l >> 4;
  return lo | (((h >> (2 * ((p / 32) % 4))) & 3) << 4);
}

struct kq_repack {
  const uint8_t *src;
  uint8_t *dst;
  int nsb;  // super-blocks per row
  int type;
};

static void
repack_q4k_group(const struct kq_repack *j, int g)
{
  for (int s = 0; s < j->nsb; s++) {
    uint8_t *rec = j->dst + ((long long)g * j->nsb + s) * PYLLM_Q4K16_RECORD;
    for (int r = 0; r < 16; r++) {
      const uint8_t *blk = j->src + ((long long)(g * 16 + r) * j->nsb + s) * 144;
      for (int u = 0; u < 8; u++) {
        for (int c = 0; c < 4; c++)
          for (int t = 0; t < 4; t++) {
            int col = 32 * u + 4 * c + t;
            rec[256 * u + 64 * c + 4 * r + t] =
              (uint8_t)(q4k_nib(blk, col) | (q4k_nib(blk, col + 16) << 4));
          }
        scale_min_k4(blk + 4, u, rec + 2048 + 16 * u + r, rec + 2176 + 16 * u + r);
      }
      memcpy(rec + 2304 + 2 * r, blk, 2);      // d
      memcpy(rec + 2336 + 2 * r, blk + 2, 2);  // dmin
    }
  }
}

static void
repack_q6k_group(const struct kq_repack *j, int g)
{
  for (int s = 0; s < j->nsb; s++) {
    uint8_t *rec = j->dst + ((long long)g * j->nsb + s) * PYLLM_Q6K16_RECORD;
    memset(rec + 3360, 0, 32);
    for (int r = 0; r < 16; r++) {
      const uint8_t *blk = j->src + ((long long)(g * 16 + r) * j->nsb + s) * 210;
      for (int u = 0; u < 8; u++) {
        uint8_t *q = rec + 384 * u;
        for (int c = 0; c < 4; c++)
          for (int t = 0; t < 4; t++) {
            int col = 32 * u + 4 * c + t;
            q[64 * c + 4 * r + t] =
              (uint8_t)((q6k_val(blk, col) & 15) | ((q6k_val(blk, col + 16) & 15) << 4));
          }
        for (int h = 0; h < 2; h++)
          for (int t = 0; t < 4; t++) {
            int bits = 0;
            for (int k = 0; k < 4; k++)
              bits |= (q6k_val(blk, 32 * u + 16 * h + 4 * k + t) >> 4) << (2 * k);
            q[256 + 64 * h + 4 * r + t] = (uint8_t)bits;
          }
      }
      for (int k = 0; k < 16; k++)
        rec[3072 + 16 * k + r] = blk[192 + k];
      memcpy(rec + 3328 + 2 * r, blk + 208, 2);  // d
    }
  }
}

static void
repack_chunk(void *arg, int g)
{
  struct kq_repack *j = arg;
  if (j->type == PYLLM_Q4K16)
    repack_q4k_group(j, g);
  else
    repack_q6k_group(j, g);
}

static int
repack(const uint8_t *src, int rows, int cols, uint8_t *dst, int type)
{
  if (rows <= 0 || rows % 16 || kq_group_bytes(type, cols) < 0)
    return -1;
  struct kq_repack j = { src, dst, cols / QK_K, type };
  pool_run(repack_chunk, &j, rows / 16);
  return 0;
}

// GGUF Q4_K rows x cols -> Q4K16 records. Returns -1 on a bad shape.
int
pyllm_repack_q4_k(const uint8_t *src, int rows, int cols, uint8_t *dst)
{
  return repack(src, rows, cols, dst, PYLLM_Q4K16);
}

// GGUF Q6_K rows x cols -> Q6K16 records. Returns -1 on a bad shape.
int
pyllm_repack_q6_k(const uint8_t *src, int rows, int cols, uint8_t *dst)
{
  return repack(src, rows, cols, dst, PYLLM_Q6K16);
}

int32_t *
kq_half_sums(const struct pyllm_qact *x, int32_t *buf, long long cap)
{
  int nb = x->cols / QK;
  long long need = (long long)x->n * nb;
  int32_t *half = need <= cap ? buf : malloc(sizeof(int32_t) * (size_t)(need > 0 ? need : 1));
  if (!half)
    return NULL;
  for (int t = 0; t < x->n; t++)
    for (int b = 0; b < nb; b++) {
      const int8_t *q = x->q + (long long)t * x->cols + b * QK;
      int s = 0;
      for (int k = 0; k < 16; k++)
        s += q[k];
      half[t * nb + b] = s;
    }
  return half;
}

static inline float
h2f(const uint8_t *p)
{
  _Float16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

// ------------------------------------------------------------ generic C

static void
q4k16_generic(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  int nb = x->cols / QK;
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + (long long)s * PYLLM_Q4K16_RECORD;
    for (int u = 0; u < 8; u++) {
      int b = 8 * s + u;
      const int8_t *xq = x->q + (long long)t * x->cols + b * QK;
      float dx = x->d[t * nb + b], dsx = x->ds[t * nb + b];
      for (int r = 0; r < 16; r++) {
        int32_t isum = 0;
        for (int c = 0; c < 4; c++)
          for (int k = 0; k < 4; k++) {
            int byte = rec[256 * u + 64 * c + 4 * r + k];
            isum += (byte & 15) * xq[4 * c + k] + (byte >> 4) * xq[16 + 4 * c + k];
          }
        float sc = h2f(rec + 2304 + 2 * r) * (float)rec[2048 + 16 * u + r];
        float mn = h2f(rec + 2336 + 2 * r) * (float)rec[2176 + 16 * u + r];
        acc[r] += (float)isum * (sc * dx);
        acc[r] -= mn * dsx;
      }
    }
  }
  memcpy(out, acc, sizeof(acc));
}

static void
q6k16_generic(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, const int32_t *half,
              int t, float *out)
{
  float acc[16] = { 0 };
  int nb = x->cols / QK;
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + (long long)s * PYLLM_Q6K16_RECORD;
    for (int u = 0; u < 8; u++) {
      int b = 8 * s + u;
      const uint8_t *q = rec + 384 * u;
      const int8_t *xq = x->q + (long long)t * x->cols + b * QK;
      float dx = x->d[t * nb + b];
      int32_t hl = half[t * nb + b], hh = x->s[t * nb + b] - hl;
      for (int r = 0; r < 16; r++) {
        int32_t lo = 0, hi = 0;
        for (int c = 0; c < 4; c++)
          for (int k = 0; k < 4; k++) {
            int nib = q[64 * c + 4 * r + k];
            int c0 = (q[256 + 4 * r + k] >> (2 * c)) & 3;
            int c1 = (q[320 + 4 * r + k] >> (2 * c)) & 3;
            lo += ((nib & 15) | (c0 << 4)) * xq[4 * c + k];
            hi += ((nib >> 4) | (c1 << 4)) * xq[16 + 4 * c + k];
          }
        float d = h2f(rec + 3328 + 2 * r);
        float slo = d * (float)(int8_t)rec[3072 + 16 * (2 * u) + r];
        float shi = d * (float)(int8_t)rec[3072 + 16 * (2 * u + 1) + r];
        acc[r] += (float)(lo - 32 * hl) * (slo * dx);
        acc[r] += (float)(hi - 32 * hh) * (shi * dx);
      }
    }
  }
  memcpy(out, acc, sizeof(acc));
}

// ------------------------------------------------------------ AVX-512 VNNI

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512
u8_ps(const uint8_t *p)
{
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)p)));
}

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512
i8_ps(const uint8_t *p)
{
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)p)));
}

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q4k16_tile(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, const int32_t *half,
           int t0, int T, float *out, int ostride)
{
  (void)half;
  __m512 facc[TILE];
  const __m512i low = _mm512_set1_epi8(0x0F);
  int nb = x->cols / QK;
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + (long long)s * PYLLM_Q4K16_RECORD;
    __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 2304)));
    __m512 mv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 2336)));
    for (int u = 0; u < 8; u++) {
      const char *ahead = (const char *)rec + 296 * u + PF_BYTES;
      for (int p = 0; p < 320; p += 64)
        _mm_prefetch(ahead + p, _MM_HINT_T1);
      const uint8_t *q = rec + 256 * u;
      __m512i c0 = _mm512_load_si512(q), c1 = _mm512_load_si512(q + 64);
      __m512i c2 = _mm512_load_si512(q + 128), c3 = _mm512_load_si512(q + 192);
      __m512i l0 = _mm512_and_si512(c0, low), h0 = _mm512_and_si512(_mm512_srli_epi16(c0, 4), low);
      __m512i l1 = _mm512_and_si512(c1, low), h1 = _mm512_and_si512(_mm512_srli_epi16(c1, 4), low);
      __m512i l2 = _mm512_and_si512(c2, low), h2 = _mm512_and_si512(_mm512_srli_epi16(c2, 4), low);
      __m512i l3 = _mm512_and_si512(c3, low), h3 = _mm512_and_si512(_mm512_srli_epi16(c3, 4), low);
      __m512 scv = _mm512_mul_ps(dv, u8_ps(rec + 2048 + 16 * u));
      __m512 mnv = _mm512_mul_ps(mv, u8_ps(rec + 2176 + 16 * u));
      int b = 8 * s + u;
      for (int t = 0; t < T; t++) {
        int tt = t0 + t;
        const int8_t *xq = x->q + (long long)tt * x->cols + b * QK;
        __m512i a0 = dp_bcast(_mm512_setzero_si512(), l0, xq);
        __m512i a1 = dp_bcast(_mm512_setzero_si512(), h0, xq + 16);
        a0 = dp_bcast(a0, l1, xq + 4);
        a1 = dp_bcast(a1, h1, xq + 20);
        a0 = dp_bcast(a0, l2, xq + 8);
        a1 = dp_bcast(a1, h2, xq + 24);
        a0 = dp_bcast(a0, l3, xq + 12);
        a1 = dp_bcast(a1, h3, xq + 28);
        __m512 sm = _mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1));
        __m512 dd = _mm512_mul_ps(scv, _mm512_set1_ps(x->d[tt * nb + b]));
        facc[t] = _mm512_fmadd_ps(sm, dd, facc[t]);
        facc[t] = _mm512_fnmadd_ps(mnv, _mm512_set1_ps(x->ds[tt * nb + b]), facc[t]);
      }
    }
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

// The 6-bit values of 4 columns x 16 rows: the 4 low bits (nib) with the 2
// high bits from bits 2k..2k+1 of each byte of a crumb chunk, moved to bits
// 4-5 (16-bit shifts; the bits they carry across bytes are masked off).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512i
q6_group(__m512i nib, __m512i crumb, int k)
{
  __m512i h;
  switch (k) {
  case 0: h = _mm512_slli_epi16(crumb, 4); break;
  case 1: h = _mm512_slli_epi16(crumb, 2); break;
  case 2: h = crumb; break;
  default: h = _mm512_srli_epi16(crumb, 2); break;
  }
  return _mm512_or_si512(nib, _mm512_and_si512(h, _mm512_set1_epi8(0x30)));
}

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q6k16_tile(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, const int32_t *half,
           int t0, int T, float *out, int ostride)
{
  __m512 facc[TILE];
  const __m512i low = _mm512_set1_epi8(0x0F);
  int nb = x->cols / QK;
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + (long long)s * PYLLM_Q6K16_RECORD;
    __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 3328)));
    for (int u = 0; u < 8; u++) {
      const char *ahead = (const char *)rec + 424 * u + PF_BYTES;
      for (int p = 0; p < 448; p += 64)
        _mm_prefetch(ahead + p, _MM_HINT_T1);
      const uint8_t *q = rec + 384 * u;
      __m512i w[8];
      __m512i k0 = _mm512_load_si512(q + 256), k1 = _mm512_load_si512(q + 320);
      for (int c = 0; c < 4; c++) {  // unrolled: c is a constant in each copy
        __m512i n = _mm512_load_si512(q + 64 * c);
        w[c] = q6_group(_mm512_and_si512(n, low), k0, c);
        w[4 + c] = q6_group(_mm512_and_si512(_mm512_srli_epi16(n, 4), low), k1, c);
      }
      __m512 slo = _mm512_mul_ps(dv, i8_ps(rec + 3072 + 32 * u));
      __m512 shi = _mm512_mul_ps(dv, i8_ps(rec + 3072 + 32 * u + 16));
      int b = 8 * s + u;
      for (int t = 0; t < T; t++) {
        int tt = t0 + t;
        const int8_t *xq = x->q + (long long)tt * x->cols + b * QK;
        __m512i a0 = dp_bcast(_mm512_setzero_si512(), w[0], xq);
        __m512i a1 = dp_bcast(_mm512_setzero_si512(), w[4], xq + 16);
        a0 = dp_bcast(a0, w[1], xq + 4);
        a1 = dp_bcast(a1, w[5], xq + 20);
        a0 = dp_bcast(a0, w[2], xq + 8);
        a1 = dp_bcast(a1, w[6], xq + 24);
        a0 = dp_bcast(a0, w[3], xq + 12);
        a1 = dp_bcast(a1, w[7], xq + 28);
        int32_t hl = half[tt * nb + b], hh = x->s[tt * nb + b] - hl;
        a0 = _mm512_sub_epi32(a0, _mm512_set1_epi32(32 * hl));
        a1 = _mm512_sub_epi32(a1, _mm512_set1_epi32(32 * hh));
        __m512 dx = _mm512_set1_ps(x->d[tt * nb + b]);
        facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_mul_ps(slo, dx), facc[t]);
        facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_mul_ps(shi, dx), facc[t]);
      }
    }
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

#define KQ_TILE_CASES(fn)                                                 \
  switch (T) {                                                            \
  case 1: fn(rec, nsb, x, half, t0, 1, o, ostride); break;                \
  case 2: fn(rec, nsb, x, half, t0, 2, o, ostride); break;                \
  case 3: fn(rec, nsb, x, half, t0, 3, o, ostride); break;                \
  case 4: fn(rec, nsb, x, half, t0, 4, o, ostride); break;                \
  case 5: fn(rec, nsb, x, half, t0, 5, o, ostride); break;                \
  case 6: fn(rec, nsb, x, half, t0, 6, o, ostride); break;                \
  case 7: fn(rec, nsb, x, half, t0, 7, o, ostride); break;                \
  default: fn(rec, nsb, x, half, t0, 8, o, ostride); break;               \
  }

static PYLLM_TARGET_AVX512 void
group_avx512(const struct pyllm_qmat *w, const struct pyllm_qact *x, const int32_t *half,
             int g, float *out, int ostride)
{
  int nsb = w->cols / QK_K;
  const uint8_t *rec = w->data + g * kq_group_bytes(w->type, w->cols);
  for (int t0 = 0; t0 < x->n; t0 += TILE) {
    int T = x->n - t0 < TILE ? x->n - t0 : TILE;
    float *o = out + (long long)t0 * ostride + g * 16;
    if (w->type == PYLLM_Q4K16) {
      KQ_TILE_CASES(q4k16_tile)
    } else {
      KQ_TILE_CASES(q6k16_tile)
    }
  }
}

void
kq_group(const struct pyllm_qmat *w, const struct pyllm_qact *x, const int32_t *half,
         int g, float *out, int ostride, int avx)
{
  if (avx) {
    group_avx512(w, x, half, g, out, ostride);
    return;
  }
  int nsb = w->cols / QK_K;
  const uint8_t *rec = w->data + g * kq_group_bytes(w->type, w->cols);
  for (int t = 0; t < x->n; t++) {
    float *o = out + (long long)t * ostride + g * 16;
    if (w->type == PYLLM_Q4K16)
      q4k16_generic(rec, nsb, x, t, o);
    else
      q6k16_generic(rec, nsb, x, half, t, o);
  }
}
