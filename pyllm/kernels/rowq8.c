// rowq8.c: the course's per-row int8 matrices -- repacking into Q8R16
// records and the two products (int8 activations on the records, float32
// activations on the course's own row-major layout). Layout in rowq8.h.

#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "pool.h"
#include "quant.h"
#include "rowq8.h"
#include "vmath.h"

#define QK 32
#define TILE 8       // tokens per pass over a row group's weights
#define PF_AHEAD 8   // records to prefetch ahead (see matmul.c)
#define F32_ROWS 4   // rows per tile of the float32 product

// Bytes of a Q8R16 rows x cols matrix, or -1 if the shape does not fit.
long long
pyllm_q8r16_bytes(int rows, int cols)
{
  if (rows <= 0 || cols <= 0 || rows % 16 || cols % QK)
    return -1;
  return (long long)(rows / 16) * (PYLLM_Q8R16_GROUP_HEAD + (cols / QK) * PYLLM_Q8R16_RECORD);
}

static long long
group_bytes(int cols)
{
  return PYLLM_Q8R16_GROUP_HEAD + (long long)(cols / QK) * PYLLM_Q8R16_RECORD;
}

// ------------------------------------------------------------ repacking

struct repack_job {
  const float *scale;
  const int8_t *q;
  int rows, cols;
  uint8_t *dst;
};

// One row group: 16 scales, then the records; rows past `rows` are padding
// (scale 0, weights 0). Four weights at a time: byte ^ 0x80 is q + 128.
static void
repack_group(void *arg, int g)
{
  struct repack_job *j = arg;
  int nb = j->cols / QK;
  uint8_t *grp = j->dst + g * group_bytes(j->cols);
  float sc[16];
  for (int r = 0; r < 16; r++)
    sc[r] = g * 16 + r < j->rows ? j->scale[g * 16 + r] : 0.0f;
  memcpy(grp, sc, sizeof(sc));
  uint8_t *rec0 = grp + PYLLM_Q8R16_GROUP_HEAD;
  for (int r = 0; r < 16; r++) {
    int row = g * 16 + r;
    const uint8_t *src = row < j->rows ? (const uint8_t *)j->q + (long long)row * j->cols : 0;
    for (int b = 0; b < nb; b++) {
      uint8_t *rec = rec0 + (long long)b * PYLLM_Q8R16_RECORD + 4 * r;
      for (int c = 0; c < 8; c++) {
        uint32_t w = 0;  // a padding row: q = 0
        if (src)
          memcpy(&w, src + b * QK + 4 * c, 4);
        w ^= 0x80808080u;
        memcpy(rec + 64 * c, &w, 4);
      }
    }
  }
}

// Course rows (scale[rows], q[rows][cols]) -> Q8R16 with rows_out rows
// (rows_out >= rows, a multiple of 16; the extra rows are zero). Returns -1
// on a bad shape.
int
pyllm_repack_rowq8(const float *scale, const int8_t *q, int rows, int cols, int rows_out,
                   uint8_t *dst)
{
  if (pyllm_q8r16_bytes(rows_out, cols) < 0 || rows <= 0 || rows > rows_out)
    return -1;
  struct repack_job j = { scale, q, rows, cols, dst };
  pool_run_bulk(repack_group, &j, rows_out / 16);
  return 0;
}

struct dq_job {
  const float *scale;
  const int8_t *q;
  int cols;
  float *out;
  int per, rows;
};

static void
dq_chunk(void *arg, int c)
{
  struct dq_job *j = arg;
  int end = (c + 1) * j->per < j->rows ? (c + 1) * j->per : j->rows;
  for (long long r = (long long)c * j->per; r < end; r++) {
    const int8_t *q = j->q + r * j->cols;
    float *o = j->out + r * j->cols, s = j->scale[r];
    for (int k = 0; k < j->cols; k++)
      o[k] = (float)q[k] * s;
  }
}

// out[r][c] = scale[r] * q[r][c] (the course's embedding rows as float32).
void
pyllm_rowq8_dequantize(const float *scale, const int8_t *q, int rows, int cols, float *out)
{
  struct dq_job j = { scale, q, cols, out, 256, rows };
  pool_run(dq_chunk, &j, (rows + j.per - 1) / j.per);
}

// ------------------------------------------------------------ int8 activations

static void
group_generic(const uint8_t *grp, int nb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = grp + PYLLM_Q8R16_GROUP_HEAD + (long long)b * PYLLM_Q8R16_RECORD;
    const int8_t *xq = x->q + (long long)t * x->cols + b * QK;
    int32_t isum[16] = { 0 };
    for (int j = 0; j < 8; j++)
      for (int r = 0; r < 16; r++)
        for (int u = 0; u < 4; u++)
          isum[r] += rec[64 * j + 4 * r + u] * xq[4 * j + u];
    int32_t off = 128 * x->s[t * nb + b];
    float dx = x->d[t * nb + b];
    for (int r = 0; r < 16; r++)
      acc[r] += (float)(isum[r] - off) * dx;
  }
  float sc[16];
  memcpy(sc, grp, sizeof(sc));
  for (int r = 0; r < 16; r++)
    out[r] = acc[r] * sc[r];
}

// One row group, T tokens (a constant at each call site, so facc[] stays in
// registers).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q8r16_tile(const uint8_t *grp, int nb, const struct pyllm_qact *x, int t0, int T, float *out,
           int ostride)
{
  __m512 facc[TILE];
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  const uint8_t *rec0 = grp + PYLLM_Q8R16_GROUP_HEAD;
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + (long long)b * PYLLM_Q8R16_RECORD;
    for (int p = 0; p < PYLLM_Q8R16_RECORD; p += 64)
      _mm_prefetch((const char *)rec + PF_AHEAD * PYLLM_Q8R16_RECORD + p, _MM_HINT_T1);
    __m512i w[8];
    for (int j = 0; j < 8; j++)
      w[j] = _mm512_load_si512(rec + 64 * j);
    for (int t = 0; t < T; t++) {
      int tt = t0 + t;
      const int8_t *xq = x->q + (long long)tt * x->cols + b * QK;
      __m512i a0 = dp_bcast(_mm512_setzero_si512(), w[0], xq);
      __m512i a1 = dp_bcast(_mm512_setzero_si512(), w[1], xq + 4);
      for (int j = 2; j < 8; j += 2) {
        a0 = dp_bcast(a0, w[j], xq + 4 * j);
        a1 = dp_bcast(a1, w[j + 1], xq + 4 * j + 4);
      }
      __m512i acc = _mm512_sub_epi32(_mm512_add_epi32(a0, a1),
                                     _mm512_set1_epi32(128 * x->s[tt * nb + b]));
      facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(x->d[tt * nb + b]),
                                facc[t]);
    }
  }
  __m512 sc = _mm512_load_ps((const float *)grp);
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, _mm512_mul_ps(facc[t], sc));
}

#define TILE_CASES                                                       \
  switch (T) {                                                           \
  case 1: q8r16_tile(grp, nb, x, t0, 1, o, rows); break;                 \
  case 2: q8r16_tile(grp, nb, x, t0, 2, o, rows); break;                 \
  case 3: q8r16_tile(grp, nb, x, t0, 3, o, rows); break;                 \
  case 4: q8r16_tile(grp, nb, x, t0, 4, o, rows); break;                 \
  case 5: q8r16_tile(grp, nb, x, t0, 5, o, rows); break;                 \
  case 6: q8r16_tile(grp, nb, x, t0, 6, o, rows); break;                 \
  case 7: q8r16_tile(grp, nb, x, t0, 7, o, rows); break;                 \
  default: q8r16_tile(grp, nb, x, t0, 8, o, rows); break;                \
  }

static PYLLM_TARGET_AVX512 void
group_avx512(const struct pyllm_qmat *w, const struct pyllm_qact *x, int g, float *out)
{
  int nb = w->cols / QK, rows = w->rows;
  const uint8_t *grp = w->data + g * group_bytes(w->cols);
  for (int t0 = 0; t0 < x->n; t0 += TILE) {
    int T = x->n - t0 < TILE ? x->n - t0 : TILE;
    float *o = out + (long long)t0 * rows + g * 16;
    TILE_CASES
  }
}

struct mm_job {
  const struct pyllm_qmat *w;
  const struct pyllm_qact *x;
  float *out;
  int groups, per, avx;
};

static void
mm_chunk(void *arg, int c)
{
  struct mm_job *j = arg;
  int end = (c + 1) * j->per < j->groups ? (c + 1) * j->per : j->groups;
  int nb = j->w->cols / QK;
  for (int g = c * j->per; g < end; g++) {
    if (j->avx) {
      group_avx512(j->w, j->x, g, j->out);
      continue;
    }
    const uint8_t *grp = j->w->data + g * group_bytes(j->w->cols);
    for (int t = 0; t < j->x->n; t++)
      group_generic(grp, nb, j->x, t, j->out + (long long)t * j->w->rows + g * 16);
  }
}

// out[t][r] for t < x->n, r < w->rows (w->type == PYLLM_Q8R16, x->cols ==
// w->cols). Chunking as in pyllm_qmatmul: ~64 KB of weight-token work per
// chunk, at least 4 chunks per thread.
void
pyllm_q8r16_matmul(const struct pyllm_qmat *w, const struct pyllm_qact *x, float *out)
{
  struct mm_job j = { w, x, out, w->rows / 16, 1, pyllm_use_avx512() };
  long long work = group_bytes(w->cols) * (x->n < TILE ? x->n : TILE);
  int per = (int)(65536 / (work > 0 ? work : 1));
  int maxper = j.groups / (4 * pyllm_get_threads());
  if (per > maxper)
    per = maxper;
  j.per = per < 1 ? 1 : per;
  pool_run_par(mm_chunk, &j, (j.groups + j.per - 1) / j.per);
}

// ------------------------------------------------------------ float32 activations

struct f32_job {
  const float *scale;
  const int8_t *q;
  int rows, cols;
  const float *x;
  int n;
  float *out;
  int per;  // rows per chunk (a multiple of F32_ROWS)
  int avx;
};

static float
dot_generic(const int8_t *q, const float *x, int cols)
{
  float acc = 0.0f;
  for (int c = 0; c < cols; c++)
    acc += (float)q[c] * x[c];
  return acc;
}

// Up to F32_ROWS rows against every token: the rows stay in L1 while the
// tokens stream past.
static PYLLM_TARGET_AVX512 void
rows_avx512(const struct f32_job *j, int r0, int nr)
{
  int cols = j->cols, full = cols / 16 * 16;
  __mmask16 tail = (__mmask16)((1u << (cols - full)) - 1);
  for (int t = 0; t < j->n; t++) {
    const float *x = j->x + (long long)t * cols;
    __m512 acc[F32_ROWS];
    for (int i = 0; i < nr; i++)
      acc[i] = _mm512_setzero_ps();
    for (int c = 0; c < full; c += 16) {
      __m512 xv = _mm512_loadu_ps(x + c);
      for (int i = 0; i < nr; i++) {
        const int8_t *q = j->q + (long long)(r0 + i) * cols + c;
        __m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
        acc[i] = _mm512_fmadd_ps(wv, xv, acc[i]);
      }
    }
    if (tail) {
      __m512 xv = _mm512_maskz_loadu_ps(tail, x + full);
      for (int i = 0; i < nr; i++) {
        const int8_t *q = j->q + (long long)(r0 + i) * cols + full;
        __m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(tail, q)));
        acc[i] = _mm512_fmadd_ps(wv, xv, acc[i]);
      }
    }
    for (int i = 0; i < nr; i++)
      j->out[(long long)t * j->rows + r0 + i] = _mm512_reduce_add_ps(acc[i]) * j->scale[r0 + i];
  }
}

static void
f32_chunk(void *arg, int c)
{
  struct f32_job *j = arg;
  int end = (c + 1) * j->per < j->rows ? (c + 1) * j->per : j->rows;
  for (int r = c * j->per; r < end; r += F32_ROWS) {
    int nr = end - r < F32_ROWS ? end - r : F32_ROWS;
    if (j->avx) {
      rows_avx512(j, r, nr);
      continue;
    }
    for (int t = 0; t < j->n; t++)
      for (int i = 0; i < nr; i++)
        j->out[(long long)t * j->rows + r + i] =
          dot_generic(j->q + (long long)(r + i) * j->cols, j->x + (long long)t * j->cols,
                      j->cols) * j->scale[r + i];
  }
}

// out[t][r] = scale[r] * sum_c q[r][c] * x[t][c] for t < n, on the course's
// row-major layout (any rows and cols), float32 activations.
void
pyllm_rowq8_matmul_f32(const float *scale, const int8_t *q, int rows, int cols, const float *x,
                       int n, float *out)
{
  struct f32_job j = { scale, q, rows, cols, x, n, out, F32_ROWS, pyllm_use_avx512() };
  long long work = (long long)F32_ROWS * cols * (n < TILE ? n : TILE);
  int per = (int)(65536 / (work > 0 ? work : 1)) * F32_ROWS;
  int maxper = rows / (4 * pyllm_get_threads()) / F32_ROWS * F32_ROWS;
  if (per > maxper)
    per = maxper;
  j.per = per < F32_ROWS ? F32_ROWS : per;
  pool_run_par(f32_chunk, &j, (rows + j.per - 1) / j.per);
}
