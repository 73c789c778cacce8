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
// The activations come quantized per 256 columns (quant.h), one scale dx per
// super-block as llama.cpp's Q8_K, so a row's super-block is summed before dx
// applies. Per 32-column sub-block u the integer dot products are exact
// (vpdpbusd), then, per super-block of token t:
//   Q4K16: out += dx * (sum_u isum_u * (d*sc_u) - dmin * sum_u m_u * sum(xq_u))
//   Q6K16: out += dx * sum_k (isum_k - 32 * sum(xq_k)) * (d*sc_k)   (k: 16 columns)
// The mins' sum is integer (vpdpwssd on int16 pairs), so per sub-block and
// token a tile does 8 vpdpbusd and one fused multiply-add (two for Q6_K's two
// 16-column scales); with a scale per 32 columns it also had to multiply the
// block's scales by that block's dx and apply the min term every block, float
// work that shares the port with vpdpbusd (docs/ARCHITECTURE.md).

#include <immintrin.h>
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
  if (type == PYLLM_Q6K16)  // pairs, and an odd last record padded to whole lines
    return (long long)(cols / QK_K) * PYLLM_Q6K16_RECORD + (cols / QK_K % 2) * 32;
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

// A row's super-block as its 256 values in column order: Q4_K's 4-bit q, or
// Q6_K's 6-bit q (0..63). Q4_K: 32 bytes per 64 columns, low nibbles first;
// Q6_K: per 128 columns 64 bytes of low nibbles (low halves first) and 32 of
// 2-bit highs (bits 2k..2k+1 for the columns 32k..32k+31).
static void
q4k_values(const uint8_t *blk, uint8_t *v)
{
  const uint8_t *qs = blk + 16;
  for (int h = 0; h < 4; h++)
    for (int i = 0; i < 32; i++) {
      v[64 * h + i] = qs[32 * h + i] & 15;
      v[64 * h + 32 + i] = qs[32 * h + i] >> 4;
    }
}

static void
q6k_values(const uint8_t *blk, uint8_t *v)
{
  for (int h = 0; h < 2; h++) {
    const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
    uint8_t *vh = v + 128 * h;
    for (int k = 0; k < 4; k++)  // columns 32k..32k+31 of the half
      for (int i = 0; i < 32; i++) {
        uint8_t l = ql[32 * (k % 2) + i];
        vh[32 * k + i] = (uint8_t)((k < 2 ? l & 15 : l >> 4) | ((qh[i] >> (2 * k)) & 3) << 4);
      }
  }
}

// The 16 rows' low nibbles of a 32-column unit, row r's share: byte 4r+t of
// chunk c = column 4c+t | column 16+4c+t << 4 (kquant.h).
static inline void
put_unit_nibbles(const uint8_t *v, uint8_t *unit, int r)
{
  for (int c = 0; c < 4; c++)
    for (int t = 0; t < 4; t++)
      unit[64 * c + 4 * r + t] = (uint8_t)((v[4 * c + t] & 15) | (v[16 + 4 * c + t] & 15) << 4);
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
  uint8_t v[256];
  for (int s = 0; s < j->nsb; s++) {
    uint8_t *rec = j->dst + ((long long)g * j->nsb + s) * PYLLM_Q4K16_RECORD;
    for (int r = 0; r < 16; r++) {
      const uint8_t *blk = j->src + ((long long)(g * 16 + r) * j->nsb + s) * 144;
      q4k_values(blk, v);
      for (int u = 0; u < 8; u++)
        put_unit_nibbles(v + 32 * u, rec + 256 * u, r);
      for (int k = 0; k < 12; k++)
        rec[2048 + 16 * k + r] = blk[4 + k];  // the packed scales and mins
      memcpy(rec + 2240 + 2 * r, blk, 2);      // d
      memcpy(rec + 2272 + 2 * r, blk + 2, 2);  // dmin
    }
  }
}

static void
repack_q6k_group(const struct kq_repack *j, int g)
{
  uint8_t v[256];
  for (int s = 0; s < j->nsb; s++) {
    uint8_t *grp = j->dst + g * kq_group_bytes(PYLLM_Q6K16, j->nsb * QK_K);
    uint8_t *rec = grp + q6k16_qs_at(s), *sc = grp + q6k16_scales_at(j->nsb, s);
    if ((j->nsb & 1) && s == j->nsb - 1)
      memset(sc + 288, 0, 32);
    for (int r = 0; r < 16; r++) {
      const uint8_t *blk = j->src + ((long long)(g * 16 + r) * j->nsb + s) * 210;
      q6k_values(blk, v);
      for (int u = 0; u < 8; u++) {
        const uint8_t *vu = v + 32 * u;
        uint8_t *q = rec + 384 * u;
        put_unit_nibbles(vu, q, r);
        for (int h = 0; h < 2; h++) {
          const uint8_t *x = vu + 16 * h;  // column 4k+t's 2 high bits -> bits 2k of byte t
          for (int t = 0; t < 4; t++)
            q[256 + 64 * h + 4 * r + t] =
              (uint8_t)(x[t] >> 4 | (x[4 + t] >> 4) << 2 | (x[8 + t] >> 4) << 4 | (x[12 + t] >> 4) << 6);
        }
      }
      for (int k = 0; k < 16; k++)
        sc[16 * k + r] = blk[192 + k];
      memcpy(sc + 256 + 2 * r, blk + 208, 2);  // d
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
  pool_run_bulk(repack_chunk, &j, rows / 16);
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

static inline float
h2f(const uint8_t *p)
{
  _Float16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

// ------------------------------------------------------------ generic C

// The sub-blocks of a row's super-block are summed first (each integer product
// times its float scale d*sc; the mins as one integer sum), then dx applies.
static void
q4k16_generic(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  int nb = x->cols / QK;
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + (long long)s * PYLLM_Q4K16_RECORD;
    const int8_t *xs = x->q + (long long)t * x->cols + s * QK_K;
    const int16_t *bs = x->b16 + (long long)t * nb + 8 * s;
    float dx = x->d[t * nb + 8 * s];
    for (int r = 0; r < 16; r++) {
      float d = h2f(rec + 2240 + 2 * r), sacc = 0;
      int32_t imin = 0;
      uint8_t packed[12];
      for (int k = 0; k < 12; k++)
        packed[k] = rec[2048 + 16 * k + r];
      for (int u = 0; u < 8; u++) {
        uint8_t sc, m;
        scale_min_k4(packed, u, &sc, &m);
        int32_t isum = 0;
        for (int c = 0; c < 4; c++)
          for (int k = 0; k < 4; k++) {
            int byte = rec[256 * u + 64 * c + 4 * r + k];
            const int8_t *xu = xs + 32 * u + 4 * c + k;
            isum += (byte & 15) * xu[0] + (byte >> 4) * xu[16];
          }
        sacc += (float)isum * (d * (float)sc);
        imin += m * bs[u];
      }
      sacc -= (float)imin * h2f(rec + 2272 + 2 * r);
      acc[r] += sacc * dx;
    }
  }
  memcpy(out, acc, sizeof(acc));
}

static void
q6k16_generic(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  int nb = x->cols / QK;
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + q6k16_qs_at(s), *sc = rec0 + q6k16_scales_at(nsb, s);
    const int8_t *xs = x->q + (long long)t * x->cols + s * QK_K;
    const int16_t *h16 = x->s16 + 2 * ((long long)t * nb + 8 * s);
    float dx = x->d[t * nb + 8 * s];
    for (int r = 0; r < 16; r++) {
      float d = h2f(sc + 256 + 2 * r), sacc = 0;
      for (int u = 0; u < 8; u++) {
        const uint8_t *q = rec + 384 * u;
        const int8_t *xq = xs + 32 * u;
        int32_t lo = 0, hi = 0;
        for (int c = 0; c < 4; c++)
          for (int k = 0; k < 4; k++) {
            int nib = q[64 * c + 4 * r + k];
            int c0 = (q[256 + 4 * r + k] >> (2 * c)) & 3;
            int c1 = (q[320 + 4 * r + k] >> (2 * c)) & 3;
            lo += ((nib & 15) | (c0 << 4)) * xq[4 * c + k];
            hi += ((nib >> 4) | (c1 << 4)) * xq[16 + 4 * c + k];
          }
        float slo = d * (float)(int8_t)sc[16 * (2 * u) + r];
        float shi = d * (float)(int8_t)sc[16 * (2 * u + 1) + r];
        sacc += (float)(lo - 32 * h16[2 * u]) * slo;
        sacc += (float)(hi - 32 * h16[2 * u + 1]) * shi;
      }
      acc[r] += sacc * dx;
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

// A Q4K16 record's packed 6-bit scales and mins (scale_min_k4's bits, 16 rows
// at once) -> sc[8][16] then m[8][16] bytes at scm (64-byte aligned). 16-bit
// shifts: the bits they carry across bytes are masked off.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q4k16_scales(const uint8_t *rec, uint8_t *scm)
{
  __m512i a = _mm512_load_si512(rec + 2048);  // bytes 0-3 of the rows: sc 0-3, top bits of sc 4-7
  __m512i b = _mm512_load_si512(rec + 2112);  // bytes 4-7: m 0-3, top bits of m 4-7
  __m512i c = _mm512_load_si512(rec + 2176);  // bytes 8-11: low bits of sc 4-7 | m 4-7 << 4
  const __m512i m63 = _mm512_set1_epi8(63), m15 = _mm512_set1_epi8(15);
  const __m512i top = _mm512_set1_epi8(0x30);
  _mm512_store_si512(scm, _mm512_and_si512(a, m63));
  _mm512_store_si512(scm + 64, _mm512_or_si512(_mm512_and_si512(c, m15),
                                               _mm512_and_si512(_mm512_srli_epi16(a, 2), top)));
  _mm512_store_si512(scm + 128, _mm512_and_si512(b, m63));
  _mm512_store_si512(scm + 192,
                     _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), m15),
                                     _mm512_and_si512(_mm512_srli_epi16(b, 2), top)));
}

// vpermw index: word 2r <- word r (m[2p][r]), word 2r+1 <- word 16+r
// (m[2p+1][r]) of a pair of min rows widened to int16, so lane r holds the
// int16 pair (m[2p][r], m[2p+1][r]) for vpdpwssd.
static const uint16_t MPAIR_IDX[32] __attribute__((aligned(64))) = {
  0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31,
};

// q4k16_generic's arithmetic: per sub-block and token 8 vpdpbusd and one fused
// multiply-add into the super-block's sum; the mins as 4 vpdpwssd (int16 pairs
// of mins times pairs of block sums) and dx once per super-block.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q4k16_tile(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, int t0, int T, float *out,
           int ostride)
{
  __m512 facc[TILE];
  const __m512i pidx = _mm512_load_si512(MPAIR_IDX);
  int nb = x->cols / QK;
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + (long long)s * PYLLM_Q4K16_RECORD;
    __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 2240)));
    __m512 mv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 2272)));
    _Alignas(64) uint8_t scm[256];
    q4k16_scales(rec, scm);
    __m512 sacc[TILE];
    for (int t = 0; t < T; t++)
      sacc[t] = _mm512_setzero_ps();
    for (int u = 0; u < 8; u++) {
      const char *ahead = (const char *)rec + 288 * u + PF_BYTES;
      for (int p = 0; p < 320; p += 64)
        _mm_prefetch(ahead + p, _MM_HINT_T1);
      const uint8_t *q = rec + 256 * u;
      __m512i w[8];
      nib_unpack(q, w);
      __m512 scv = _mm512_mul_ps(dv, u8_ps(scm + 16 * u));
      for (int t = 0; t < T; t++) {
        const int8_t *xq = x->q + (long long)(t0 + t) * x->cols + s * QK_K + 32 * u;
        __m512i a0, a1;
        dp_block(w, xq, &a0, &a1);
        sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), scv, sacc[t]);
      }
    }
    __m512i mp[4];
    for (int p = 0; p < 4; p++)
      mp[p] = _mm512_permutexvar_epi16(
        pidx, _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(scm + 128 + 32 * p))));
    for (int t = 0; t < T; t++) {
      long long at = (long long)(t0 + t) * nb + 8 * s;
      const int16_t *bs = x->b16 + at;
      __m512i im = dpw_bcast(_mm512_setzero_si512(), mp[0], bs);
      im = dpw_bcast(im, mp[1], bs + 2);
      im = dpw_bcast(im, mp[2], bs + 4);
      im = dpw_bcast(im, mp[3], bs + 6);
      __m512 sa = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(im), mv, sacc[t]);
      facc[t] = _mm512_fmadd_ps(sa, _mm512_set1_ps(x->d[at]), facc[t]);
    }
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

// q6k16_generic's arithmetic: per 16-column half the offset -32 * sum(xq) in
// integers, one fused multiply-add into the super-block's sum, dx once per
// super-block.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q6k16_tile(const uint8_t *rec0, int nsb, const struct pyllm_qact *x, int t0, int T, float *out,
           int ostride)
{
  __m512 facc[TILE];
  const __m512i low = _mm512_set1_epi8(0x0F);
  int nb = x->cols / QK;
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int s = 0; s < nsb; s++) {
    const uint8_t *rec = rec0 + q6k16_qs_at(s), *sc = rec0 + q6k16_scales_at(nsb, s);
    __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + 256)));
    __m512 sacc[TILE];
    for (int t = 0; t < T; t++)
      sacc[t] = _mm512_setzero_ps();
    for (int u = 0; u < 8; u++) {
      // a unit's share of the stream (420 bytes: 7 prefetches cover it
      // wherever it starts), PF_BYTES ahead
      const char *ahead = (const char *)rec0 + (long long)s * PYLLM_Q6K16_RECORD + 420 * u
                          + PF_BYTES;
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
      __m512 slo = _mm512_mul_ps(dv, i8_ps(sc + 32 * u));
      __m512 shi = _mm512_mul_ps(dv, i8_ps(sc + 32 * u + 16));
      int b = 8 * s + u;
      for (int t = 0; t < T; t++) {
        int tt = t0 + t;
        const int8_t *xq = x->q + (long long)tt * x->cols + b * QK;
        __m512i a0, a1;
        dp_block(w, xq, &a0, &a1);
        const int16_t *h = x->s16 + 2 * ((long long)tt * nb + b);
        a0 = _mm512_sub_epi32(a0, _mm512_set1_epi32(32 * h[0]));
        a1 = _mm512_sub_epi32(a1, _mm512_set1_epi32(32 * h[1]));
        sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), slo, sacc[t]);
        sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), shi, sacc[t]);
      }
    }
    for (int t = 0; t < T; t++)
      facc[t] = _mm512_fmadd_ps(sacc[t], _mm512_set1_ps(x->d[(long long)(t0 + t) * nb + 8 * s]),
                                facc[t]);
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

#define KQ_TILE_CASES(fn)                                                 \
  switch (T) {                                                            \
  case 1: fn(rec, nsb, x, t0, 1, o, ostride); break;                \
  case 2: fn(rec, nsb, x, t0, 2, o, ostride); break;                \
  case 3: fn(rec, nsb, x, t0, 3, o, ostride); break;                \
  case 4: fn(rec, nsb, x, t0, 4, o, ostride); break;                \
  case 5: fn(rec, nsb, x, t0, 5, o, ostride); break;                \
  case 6: fn(rec, nsb, x, t0, 6, o, ostride); break;                \
  case 7: fn(rec, nsb, x, t0, 7, o, ostride); break;                \
  default: fn(rec, nsb, x, t0, 8, o, ostride); break;               \
  }

static PYLLM_TARGET_AVX512 void
group_avx512(const struct pyllm_qmat *w, const struct pyllm_qact *x, int g, float *out,
             int ostride)
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
kq_group(const struct pyllm_qmat *w, const struct pyllm_qact *x, int g, float *out, int ostride,
         int avx)
{
  if (avx) {
    group_avx512(w, x, g, out, ostride);
    return;
  }
  int nsb = w->cols / QK_K;
  const uint8_t *rec = w->data + g * kq_group_bytes(w->type, w->cols);
  for (int t = 0; t < x->n; t++) {
    float *o = out + (long long)t * ostride + g * 16;
    if (w->type == PYLLM_Q4K16)
      q4k16_generic(rec, nsb, x, t, o);
    else
      q6k16_generic(rec, nsb, x, t, o);
  }
}
