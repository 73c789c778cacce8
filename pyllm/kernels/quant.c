// quant.c: repacking GGUF weight blocks into the 16-row records of quant.h,
// and quantizing activations to int8 blocks.

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dequant.h"
#include "kernels.h"
#include "kquant.h"
#include "pool.h"
#include "quant.h"

#define QK 32

// Bytes of a repacked rows x cols matrix, or -1 if the shape does not fit.
long long
pyllm_qmat_bytes(int type, int rows, int cols)
{
  if (rows <= 0 || cols <= 0 || rows % 16 || cols % QK)
    return -1;
  long long nb = cols / QK;
  if (type == PYLLM_Q4X16)
    return rows / 16 * nb * PYLLM_Q4X16_RECORD;
  if (type == PYLLM_Q8X16)
    return rows / 16 * pyllm_q8x16_group_bytes(cols);
  if (type == PYLLM_Q5X16)  // pairs, and an odd last record padded to whole lines
    return rows / 16 * (nb * PYLLM_Q5X16_RECORD + (nb & 1) * 32);
  if (type == PYLLM_Q4K16 || type == PYLLM_Q6K16) {
    long long g = kq_group_bytes(type, cols);
    return g < 0 ? -1 : rows / 16 * g;
  }
  return -1;
}

// Bytes of one 16-row Q8X16 group of `cols` columns (quant.h): the blocks, the
// scales, and the 32 bytes that round an odd block count to whole lines.
long long
pyllm_q8x16_group_bytes(int cols)
{
  long long nb = cols / QK;
  return nb * (PYLLM_Q8X16_QS + PYLLM_Q8X16_SCALES) + (nb & 1) * 32;
}

// The 32 zero bytes after an odd last block's scales (quant.h).
static void
q8x16_zero_tail(uint8_t *grp, int nb)
{
  if (nb & 1)
    memset(grp + q8x16_scales_at(nb, nb - 1) + PYLLM_Q8X16_SCALES, 0, 32);
}

// Bits 0, 4, 8 and 12 of x as bits 0-3: times 0x1248 they land in bits 12-15,
// and every other product falls in a bit of its own (3, 6, 7, 9, 10, 11, 16-18,
// 20, 21, 24), so nothing carries into them.
static inline unsigned
gather4(uint32_t x)
{
  return ((x & 0x1111u) * 0x1248u) >> 12 & 15;
}

struct repack_job {
  const uint8_t *src;
  uint8_t *dst;
  int nb;     // blocks per row
  int type;
};

// One row group (16 rows): GGUF blocks -> nb records.
static void
repack_group(void *arg, int g)
{
  struct repack_job *j = arg;
  int nb = j->nb;
  if (j->type == PYLLM_Q4X16) {
    for (int b = 0; b < nb; b++) {
      uint8_t *rec = j->dst + ((long long)g * nb + b) * PYLLM_Q4X16_RECORD;
      for (int r = 0; r < 16; r++) {
        const uint8_t *blk = j->src + ((long long)(g * 16 + r) * nb + b) * 20;
        for (int c = 0; c < 4; c++)
          memcpy(rec + 64 * c + 4 * r, blk + 4 + 4 * c, 4);
        memcpy(rec + 256 + 2 * r, blk, 2);      // d
        memcpy(rec + 288 + 2 * r, blk + 2, 2);  // m
      }
    }
  } else if (j->type == PYLLM_Q5X16) {
    uint8_t *grp = j->dst + g * pyllm_qmat_bytes(PYLLM_Q5X16, 16, nb * QK);
    for (int b = 0; b < nb; b++) {
      uint8_t *body = grp + q5x16_body_at(b), *sc = grp + q5x16_scales_at(nb, b);
      for (int r = 0; r < 16; r++) {
        const uint8_t *blk = j->src + ((long long)(g * 16 + r) * nb + b) * 22;
        uint32_t qh;
        memcpy(&qh, blk + 2, 4);
        for (int c = 0; c < 4; c++)
          memcpy(body + 64 * c + 4 * r, blk + 6 + 4 * c, 4);
        for (int t = 0; t < 4; t++)  // bits t, t+4, t+8, t+12 of each half
          body[256 + 4 * r + t] = (uint8_t)(gather4(qh >> t) | gather4(qh >> (16 + t)) << 4);
        memcpy(sc + 2 * r, blk, 2);  // d
      }
    }
    if (nb & 1)
      memset(grp + q5x16_scales_at(nb, nb - 1) + 32, 0, 32);
  } else {
    uint8_t *grp = j->dst + g * pyllm_q8x16_group_bytes(nb * QK);
    for (int b = 0; b < nb; b++) {
      uint8_t *rec = grp + q8x16_qs_at(b), *sc = grp + q8x16_scales_at(nb, b);
      for (int r = 0; r < 16; r++) {
        const uint8_t *blk = j->src + ((long long)(g * 16 + r) * nb + b) * 34;
        for (int c = 0; c < 8; c++) {  // 4 columns at a time, +128 as u8
          uint32_t q;
          memcpy(&q, blk + 2 + 4 * c, 4);
          q ^= 0x80808080u;
          memcpy(rec + 64 * c + 4 * r, &q, 4);
        }
        memcpy(sc + 2 * r, blk, 2);
      }
    }
    q8x16_zero_tail(grp, nb);
  }
}

static int
repack(const uint8_t *src, int rows, int cols, uint8_t *dst, int type)
{
  if (pyllm_qmat_bytes(type, rows, cols) < 0)
    return -1;
  struct repack_job j = { src, dst, cols / QK, type };
  pool_run_bulk(repack_group, &j, rows / 16);
  return 0;
}

// GGUF Q4_1 rows x cols -> Q4X16. Returns -1 on a bad shape.
int
pyllm_repack_q4_1(const uint8_t *src, int rows, int cols, uint8_t *dst)
{
  return repack(src, rows, cols, dst, PYLLM_Q4X16);
}

// GGUF Q5_0 rows x cols -> Q5X16. Returns -1 on a bad shape.
int
pyllm_repack_q5_0(const uint8_t *src, int rows, int cols, uint8_t *dst)
{
  return repack(src, rows, cols, dst, PYLLM_Q5X16);
}

// GGUF Q8_0 rows x cols -> Q8X16. Returns -1 on a bad shape.
int
pyllm_repack_q8_0(const uint8_t *src, int rows, int cols, uint8_t *dst)
{
  return repack(src, rows, cols, dst, PYLLM_Q8X16);
}

static uint16_t
f32_to_f16(float f)
{
  _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}

// Round to nearest, ties to even, as nearbyintf does in the default rounding
// mode, for |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits. Inline, where
// nearbyintf at the baseline target is a library call per weight. NaN and
// infinities go through unchanged, as they do through nearbyintf.
static inline float
round_even(float v)
{
  return (v + 12582912.0f) - 12582912.0f;
}

// quantize_group's arithmetic 16 weights a step, the same values: the max of
// |x| with NaN passed over (vmaxps returns its second operand when one is NaN,
// and the running max never is), the scale as in C, x * id rounded to nearest
// even by vcvtps2dq (the default rounding mode, as nearbyintf), clamped, +128.
// A row's 32 bytes go to the record 4 columns at a time.
static PYLLM_TARGET_AVX512 void
quantize_group_avx512(const float *src, int cols, uint8_t *grp)
{
  int nb = cols / QK;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i bias = _mm512_set1_epi32(128);
  q8x16_zero_tail(grp, nb);
  for (int b = 0; b < nb; b++) {
    uint8_t *rec = grp + q8x16_qs_at(b), *sc = grp + q8x16_scales_at(nb, b);
    for (int r = 0; r < 16; r++) {
      const float *x = src + (long long)r * cols + b * QK;
      __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
      __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_setzero_ps());
      m = _mm512_max_ps(_mm512_andnot_ps(sign, x1), m);
      float amax = _mm512_reduce_max_ps(m);
      uint16_t dh = _cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);  // F16C: as f32_to_f16
      float d = _cvtsh_ss(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
      __m512 idv = _mm512_set1_ps(id);
      __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, idv));
      __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, idv));
      q0 = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q0, lo), hi), bias);
      q1 = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q1, lo), hi), bias);
      _Alignas(32) uint32_t w[8];
      _mm_store_si128((__m128i *)w, _mm512_cvtepi32_epi8(q0));
      _mm_store_si128((__m128i *)(w + 4), _mm512_cvtepi32_epi8(q1));
      for (int c = 0; c < 8; c++)
        memcpy(rec + 64 * c + 4 * r, &w[c], 4);
      memcpy(sc + 2 * r, &dh, 2);
    }
  }
}

// 16 rows of float32 (row stride cols) -> one Q8X16 row group: each 32-weight
// block gets its own scale, like GGUF's Q8_0 (d = f16(amax / 127)).
static void
quantize_group(const float *src, int cols, uint8_t *grp)
{
  if (pyllm_use_avx512()) {
    quantize_group_avx512(src, cols, grp);
    return;
  }
  int nb = cols / QK;
  q8x16_zero_tail(grp, nb);
  for (int b = 0; b < nb; b++) {
    uint8_t *rec = grp + q8x16_qs_at(b), *sc = grp + q8x16_scales_at(nb, b);
    for (int r = 0; r < 16; r++) {
      const float *x = src + (long long)r * cols + b * QK;
      float amax = 0;
      for (int k = 0; k < QK; k++) {  // fmaxf(amax, |x|): a NaN is passed over
        float a = fabsf(x[k]);
        amax = a > amax ? a : amax;
      }
      uint16_t dh = f32_to_f16(amax / 127.0f);
      _Float16 dhf;
      memcpy(&dhf, &dh, 2);
      float d = (float)dhf, id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int k = 0; k < QK; k++) {
        int q = (int)round_even(x[k] * id);
        q = q < -127 ? -127 : q > 127 ? 127 : q;
        rec[64 * (k / 4) + 4 * r + k % 4] = (uint8_t)(q + 128);
      }
      memcpy(sc + 2 * r, &dh, 2);
    }
  }
}

// A float32 matrix (from F32/F16/BF16 tensors) -> Q8X16.
int
pyllm_quantize_f32_q8x16(const float *src, int rows, int cols, uint8_t *dst)
{
  if (pyllm_qmat_bytes(PYLLM_Q8X16, rows, cols) < 0)
    return -1;
  long long gbytes = pyllm_q8x16_group_bytes(cols);
  for (int g = 0; g < rows / 16; g++)
    quantize_group(src + (long long)g * 16 * cols, cols, dst + g * gbytes);
  return 0;
}

struct requant_job {
  int type, rows, cols, block_w, block_bytes;  // block_*: weights and bytes of a GGUF block
  const uint8_t *src;
  uint8_t *dst;
};

// A thread's buffer for a row group's float32 values: kept from group to group
// (allocating and zeroing one per group cost as much as the work on a small
// matrix), grown when a wider matrix comes.
static __thread float *group_buf;
static __thread size_t group_cap;

static float *
group_buffer(size_t n)
{
  if (n > group_cap) {
    float *p = realloc(group_buf, n * sizeof(float));
    if (p == NULL)
      return NULL;
    group_buf = p;
    group_cap = n;
  }
  return group_buf;
}

// Row group g: its rows dequantized into the thread's buffer (which the caches
// hold), rows past the matrix's end zero, then quantized.
static void
requant_group(void *arg, int g)
{
  struct requant_job *j = arg;
  int n = j->rows - 16 * g < 16 ? j->rows - 16 * g : 16;
  long long per_row = j->cols / j->block_w;
  float *x = group_buffer((size_t)16 * j->cols);
  if (x == NULL)
    return;  // pyllm_requant_q8x16 made sure one this size could be had
  pyllm_dequant(j->type, j->src + (long long)g * 16 * per_row * j->block_bytes, n * per_row, x);
  memset(x + (long long)n * j->cols, 0, sizeof(float) * (size_t)(16 - n) * j->cols);
  quantize_group(x, j->cols, j->dst + g * pyllm_q8x16_group_bytes(j->cols));
}

// `rows` rows of GGUF blocks of type `ggml_type` (dequant.h) -> Q8X16 records
// of the rows padded to a multiple of 16: what dequantizing to float32 and
// pyllm_quantize_f32_q8x16 give, one row group at a time on the pool.
// Returns -1 on a bad shape or type, -2 out of memory.
int
pyllm_requant_q8x16(int ggml_type, const uint8_t *src, int rows, int cols, uint8_t *dst)
{
  int padded = (rows + 15) / 16 * 16;
  struct requant_job j = { ggml_type, rows, cols, 0, 0, src, dst };
  if (pyllm_dequant_block(ggml_type, &j.block_w, &j.block_bytes) < 0 || rows <= 0
      || cols % j.block_w || pyllm_qmat_bytes(PYLLM_Q8X16, padded, cols) < 0)
    return -1;
  if (group_buffer((size_t)16 * cols) == NULL)  // the caller's; the workers' are as large
    return -2;
  pool_run_bulk(requant_group, &j, padded / 16);
  return 0;
}

// The 16 lanes of v[k] reduced to one lane per k, for 16 vectors at once: a
// tree of 15 shuffle-and-combine steps instead of 16 horizontal reductions
// of 4 dependent steps each. OP combines two vectors; the reductions come out
// in the lane order that TREE_ORDER puts back.
#define HREDUCE16(OP, v, out)                                                        \
  do {                                                                               \
    __m512 h1[8], h2[4], h3[2];                                                      \
    for (int k = 0; k < 8; k++)  /* 256-bit halves of v[2k], then of v[2k+1] */      \
      h1[k] = OP(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),                 \
                 _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));                \
    for (int k = 0; k < 4; k++)  /* one 128-bit lane per source vector */            \
      h2[k] = OP(_mm512_shuffle_f32x4(h1[2 * k], h1[2 * k + 1], 0x88),               \
                 _mm512_shuffle_f32x4(h1[2 * k], h1[2 * k + 1], 0xDD));              \
    for (int k = 0; k < 2; k++)  /* two floats per source vector */                  \
      h3[k] = OP(_mm512_shuffle_ps(h2[2 * k], h2[2 * k + 1], 0x44),                  \
                 _mm512_shuffle_ps(h2[2 * k], h2[2 * k + 1], 0xEE));                 \
    out = OP(_mm512_shuffle_ps(h3[0], h3[1], 0x88), _mm512_shuffle_ps(h3[0], h3[1], 0xDD)); \
  } while (0)

// lane k of a permutexvar with this index = the tree's result for vector k
#define TREE_ORDER _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512
add_i32(__m512 a, __m512 b)
{
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// 16 blocks (512 floats) of a row -> their int8 values, scales and sums: the
// per-block code below, with the two reductions of the 16 blocks done
// together and the divisions as vectors. Max and integer sums are exact in any
// order and vdivps rounds like the scalar division, so the bits are the same,
// in fewer instructions (which shows in a batched decode step).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
quantize16(const float *xb, int8_t *q, float *d_out, int32_t *s_out, float *ds_out)
{
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 m[16], sums[16], amax, sv;
  for (int k = 0; k < 16; k++)
    m[k] = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 32 * k)),
                         _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 32 * k + 16)));
  HREDUCE16(_mm512_max_ps, m, amax);
  amax = _mm512_permutexvar_ps(TREE_ORDER, amax);
  __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  __mmask16 nz = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  float id[16];
  _mm512_storeu_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), amax));
  for (int k = 0; k < 16; k++) {
    __m512 iv = _mm512_set1_ps(id[k]);
    __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * k), iv));
    __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * k + 16), iv));
    _mm_storeu_si128((__m128i *)(q + 32 * k), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(q + 32 * k + 16), _mm512_cvtepi32_epi8(q1));
    sums[k] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
  }
  HREDUCE16(add_i32, sums, sv);
  __m512i s = _mm512_permutexvar_epi32(TREE_ORDER, _mm512_castps_si512(sv));
  _mm512_storeu_ps(d_out, d);
  _mm512_storeu_si512(s_out, s);
  _mm512_storeu_ps(ds_out, _mm512_mul_ps(d, _mm512_cvtepi32_ps(s)));
}

static PYLLM_TARGET_AVX512 void
quantize_rows_avx512(const float *x, int i0, int i1, int cols, struct pyllm_qact *out)
{
  int nb = cols / QK;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int i = i0; i < i1; i++) {
    int b = 0;
    for (; b + 16 <= nb; b += 16)
      quantize16(x + (long long)i * cols + b * QK, out->q + (long long)i * cols + b * QK,
                 out->d + i * nb + b, out->s + i * nb + b, out->ds + i * nb + b);
    for (; b < nb; b++) {  // the rest one block at a time
      const float *xb = x + (long long)i * cols + b * QK;
      __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
      __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1));
      float amax = _mm512_reduce_max_ps(a);
      float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
      __m512 idv = _mm512_set1_ps(id);
      // cvtps rounds to nearest even, like nearbyintf in the default mode
      __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, idv));
      __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, idv));
      int8_t *q = out->q + (long long)i * cols + b * QK;
      _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
      int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      out->d[i * nb + b] = d;
      out->s[i * nb + b] = sum;
      out->ds[i * nb + b] = d * (float)sum;
    }
  }
}

// 256 columns of a row -> int8 with one scale dx for all: the same rounding as
// the per-32 quantizer, then the sums of each 16 and 32 columns. The 16 sums are
// reduced together as in quantize16; max, integer sums and the division are
// exact or correctly rounded in any order, so both paths give the same bits.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
quantize256(const float *xb, int8_t *q, float *d_out, int32_t *s_out, float *ds_out,
            int16_t *s16, int16_t *b16)
{
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 a = _mm512_setzero_ps(), sums[16], sv;
  for (int k = 0; k < 16; k++)
    a = _mm512_max_ps(a, _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * k)));
  float amax = _mm512_reduce_max_ps(a);
  float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  __m512 iv = _mm512_set1_ps(id);
  for (int k = 0; k < 16; k++) {
    __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * k), iv));
    _mm_storeu_si128((__m128i *)(q + 16 * k), _mm512_cvtepi32_epi8(qi));
    sums[k] = _mm512_castsi512_ps(qi);
  }
  HREDUCE16(add_i32, sums, sv);
  __m512i h = _mm512_permutexvar_epi32(TREE_ORDER, _mm512_castps_si512(sv));  // 16-col sums
  _mm256_storeu_si256((__m256i *)s16, _mm512_cvtepi32_epi16(h));
  // lanes 2j and 2j+1 added: the 8 block sums in the low 8 lanes
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512i b = _mm512_add_epi32(_mm512_permutexvar_epi32(even, h), _mm512_permutexvar_epi32(odd, h));
  __m256i b8 = _mm512_castsi512_si256(b);
  _mm256_storeu_si256((__m256i *)s_out, b8);
  _mm_storeu_si128((__m128i *)b16, _mm256_cvtepi32_epi16(b8));
  __m256 dv = _mm256_set1_ps(d);
  _mm256_storeu_ps(d_out, dv);
  _mm256_storeu_ps(ds_out, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(b8)));
}

static PYLLM_TARGET_AVX512 void
quantize_rows_k_avx512(const float *x, int i0, int i1, int cols, struct pyllm_qact *out)
{
  int nb = cols / QK;
  for (int i = i0; i < i1; i++)
    for (int b = 0; b < nb; b += 8)
      quantize256(x + (long long)i * cols + b * QK, out->q + (long long)i * cols + b * QK,
                  out->d + i * nb + b, out->s + i * nb + b, out->ds + i * nb + b,
                  out->s16 + 2 * (i * nb + b), out->b16 + i * nb + b);
}

static void
quantize_rows_k(const float *x, int i0, int i1, int cols, struct pyllm_qact *out)
{
  if (pyllm_use_avx512()) {
    quantize_rows_k_avx512(x, i0, i1, cols, out);
    return;
  }
  int nb = cols / QK;
  for (int i = i0; i < i1; i++)
    for (int b0 = 0; b0 < nb; b0 += 8) {
      const float *xs = x + (long long)i * cols + b0 * QK;
      int8_t *q = out->q + (long long)i * cols + b0 * QK;
      float amax = 0;
      for (int k = 0; k < 8 * QK; k++)
        amax = fmaxf(amax, fabsf(xs[k]));
      float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
      for (int b = 0; b < 8; b++) {
        int half[2] = { 0, 0 };
        for (int k = 0; k < QK; k++) {
          int v = (int)nearbyintf(xs[b * QK + k] * id);
          q[b * QK + k] = (int8_t)v;
          half[k / 16] += v;
        }
        int at = i * nb + b0 + b, sum = half[0] + half[1];
        out->d[at] = d;
        out->s[at] = sum;
        out->ds[at] = d * (float)sum;
        out->s16[2 * at] = (int16_t)half[0];
        out->s16[2 * at + 1] = (int16_t)half[1];
        out->b16[at] = (int16_t)sum;
      }
    }
}

// Rows [i0, i1) of x[n][cols] -> int8 blocks. Same rounding (half to even)
// on both paths and in the numpy twin.
void
quantize_rows(const float *x, int i0, int i1, int cols, struct pyllm_qact *out)
{
  if (out->group == 256) {
    quantize_rows_k(x, i0, i1, cols, out);
    return;
  }
  if (pyllm_use_avx512()) {
    quantize_rows_avx512(x, i0, i1, cols, out);
    return;
  }
  int nb = cols / QK;
  for (int i = i0; i < i1; i++)
    for (int b = 0; b < nb; b++) {
      const float *xb = x + (long long)i * cols + b * QK;
      int8_t *q = out->q + (long long)i * cols + b * QK;
      float amax = 0;
      for (int k = 0; k < QK; k++)
        amax = fmaxf(amax, fabsf(xb[k]));
      float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int k = 0; k < QK; k++) {
        int v = (int)nearbyintf(xb[k] * id);
        q[k] = (int8_t)v;
        sum += v;
      }
      out->d[i * nb + b] = d;
      out->s[i * nb + b] = sum;
      out->ds[i * nb + b] = d * (float)sum;
    }
}

void
pyllm_quantize_act(const float *x, int n, int cols, struct pyllm_qact *out)
{
  out->group = QK;
  quantize_rows(x, 0, n, cols, out);
  out->n = n;
  out->cols = cols;
}

static int
is_k(int type)
{
  return type == PYLLM_Q4K16 || type == PYLLM_Q6K16;
}

int
pyllm_act_group(const struct pyllm_qmat *w)
{
  int k = is_k(w->type);
  if (w->type == PYLLM_PARTS)
    for (int i = 0; i < w->nparts; i++)
      k |= is_k(w->parts[i].type);
  return k && w->cols % 256 == 0 ? 256 : QK;
}

void
pyllm_quantize_act_for(const struct pyllm_qmat *w, const float *x, int n, struct pyllm_qact *out)
{
  out->group = pyllm_act_group(w);
  quantize_rows(x, 0, n, w->cols, out);
  out->n = n;
  out->cols = w->cols;
}
