// matmul.c: out[t][row] = sum_col W[row][col] * x[t][col] for the repacked
// Q4X16 / Q8X16 weights of quant.h and int8 activations -- the hot spot of
// the whole engine (decode is one such product per weight matrix per token;
// prefill and batched decode multiply several tokens per weight load).
//
// Per 32-column block the integer dot products are exact (VNNI vpdpbusd:
// unsigned weight byte x signed activation byte, summed in int32); the
// block's float scales are applied after:
//   Q4X16: out += isum * (d[r] * dx) + m[r] * (dx * sum(xq))
//   Q5X16: out += (isum - 16 * sum(xq)) * (d[r] * dx)
//   Q8X16: out += (isum - 128 * sum(xq)) * (d[r] * dx)
// Work is split by row groups (16 rows) over the thread pool; each chunk
// walks its groups for every token tile of up to 8 tokens.

#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "kquant.h"
#include "pool.h"
#include "quant.h"
#include "rowq8.h"
#include "vmath.h"

#define QK 32
#define TILE 8  // tokens per pass over a row group's weights
// Records ahead to prefetch into L2: one core alone cannot keep enough cache
// misses in flight to reach the memory bandwidth on its own. About 5 KB ahead
// for Q4X16 and 4 KB for Q8X16: the distances that did best in alternating
// decode steps of SmolLM2 on two threads (farther ahead helps Q4X16 at 1 and
// 8 sequences; for Q8X16, the LM head, it slows the 8-sequence step).
#define PF_AHEAD_Q4 16
#define PF_AHEAD_Q8 8
#define Q8_SHARE (PYLLM_Q8X16_QS + PYLLM_Q8X16_SCALES)  // a Q8X16 block's bytes on average

static inline float
h2f(const uint8_t *p)
{
  _Float16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

// ------------------------------------------------------------ generic C

static void
q4x16_generic(const uint8_t *rec0, int nb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + (long long)b * PYLLM_Q4X16_RECORD;
    const int8_t *xq = x->q + (long long)t * x->cols + b * QK;
    int32_t isum[16] = { 0 };
    for (int j = 0; j < 4; j++)
      for (int r = 0; r < 16; r++)
        for (int u = 0; u < 4; u++) {
          int byte = rec[64 * j + 4 * r + u];
          isum[r] += (byte & 15) * xq[4 * j + u] + (byte >> 4) * xq[16 + 4 * j + u];
        }
    float dx = x->d[t * nb + b], dsx = x->ds[t * nb + b];
    for (int r = 0; r < 16; r++) {
      acc[r] += (float)isum[r] * (h2f(rec + 256 + 2 * r) * dx);
      acc[r] += h2f(rec + 288 + 2 * r) * dsx;
    }
  }
  memcpy(out, acc, sizeof(acc));
}

static void
q5x16_generic(const uint8_t *rec0, int nb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + q5x16_body_at(b), *sc = rec0 + q5x16_scales_at(nb, b);
    const int8_t *xq = x->q + (long long)t * x->cols + b * QK;
    int32_t isum[16] = { 0 };
    for (int j = 0; j < 4; j++)
      for (int r = 0; r < 16; r++)
        for (int u = 0; u < 4; u++) {
          int byte = rec[64 * j + 4 * r + u], hb = rec[256 + 4 * r + u];
          isum[r] += ((byte & 15) | ((hb >> j) & 1) << 4) * xq[4 * j + u] +
                     ((byte >> 4) | ((hb >> (4 + j)) & 1) << 4) * xq[16 + 4 * j + u];
        }
    int32_t off = 16 * x->s[t * nb + b];
    float dx = x->d[t * nb + b];
    for (int r = 0; r < 16; r++)
      acc[r] += (float)(isum[r] - off) * (h2f(sc + 2 * r) * dx);
  }
  memcpy(out, acc, sizeof(acc));
}

static void
q8x16_generic(const uint8_t *rec0, int nb, const struct pyllm_qact *x, int t, float *out)
{
  float acc[16] = { 0 };
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + q8x16_qs_at(b), *sc = rec0 + q8x16_scales_at(nb, b);
    const int8_t *xq = x->q + (long long)t * x->cols + b * QK;
    int32_t isum[16] = { 0 };
    for (int j = 0; j < 8; j++)
      for (int r = 0; r < 16; r++)
        for (int u = 0; u < 4; u++)
          isum[r] += rec[64 * j + 4 * r + u] * xq[4 * j + u];
    int32_t off = 128 * x->s[t * nb + b];
    float dx = x->d[t * nb + b];
    for (int r = 0; r < 16; r++)
      acc[r] += (float)(isum[r] - off) * (h2f(sc + 2 * r) * dx);
  }
  memcpy(out, acc, sizeof(acc));
}

// ------------------------------------------------------------ AVX-512 VNNI

// One row group, T tokens (T is a constant at each call site, so facc[]
// lives in registers).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q4x16_tile(const uint8_t *rec0, int nb, const struct pyllm_qact *x, int t0, int T,
           float *out, int ostride)
{
  __m512 facc[TILE];
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + (long long)b * PYLLM_Q4X16_RECORD;
    for (int p = 0; p < PYLLM_Q4X16_RECORD; p += 64)
      _mm_prefetch((const char *)rec + PF_AHEAD_Q4 * PYLLM_Q4X16_RECORD + p, _MM_HINT_T1);
    __m512i w[8];
    nib_unpack(rec, w);
    __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 256)));
    __m512 m = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 288)));
    for (int t = 0; t < T; t++) {
      int tt = t0 + t;
      const int8_t *xq = x->q + (long long)tt * x->cols + b * QK;
      __m512i a0, a1;
      dp_block(w, xq, &a0, &a1);
      __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1));
      __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(x->d[tt * nb + b]));
      facc[t] = _mm512_fmadd_ps(s, dd, facc[t]);
      facc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x->ds[tt * nb + b]), facc[t]);
    }
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

// Q5X16: the nibbles of 4 columns x 16 rows with their fifth bits, from bit
// j (low half: shift == 4 - j) or bit 4 + j (high half: shift == -j) of each
// byte of the bit chunk moved to bit 4 (16-bit shifts; the bits they carry
// across bytes are masked off).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 __m512i
q5_group(__m512i nib, __m512i bits, int shift)
{
  __m512i h = shift > 0 ? _mm512_slli_epi16(bits, shift)
            : shift < 0 ? _mm512_srli_epi16(bits, -shift) : bits;
  return _mm512_or_si512(nib, _mm512_and_si512(h, _mm512_set1_epi8(0x10)));
}

// A Q5X16 record's 16 rows x 32 columns as bytes 0..31, in Q8X16's chunk order.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q5x16_unpack(const uint8_t *rec, __m512i *w)
{
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512i hb = _mm512_load_si512(rec + 256);
  for (int j = 0; j < 4; j++) {  // unrolled: j is a constant in each copy
    __m512i n = _mm512_load_si512(rec + 64 * j);
    w[j] = q5_group(_mm512_and_si512(n, low), hb, 4 - j);
    w[4 + j] = q5_group(_mm512_and_si512(_mm512_srli_epi16(n, 4), low), hb, -j);
  }
}

// Every token t0.. of a tile against block b of a Q5X16 row group (w: its
// values as unsigned bytes, 0..31 for q + 16; d: the 16 rows' scales):
// facc[t] += d * dx * (w . xq - 16 * sum(xq)).
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q5_block_tokens(const __m512i *w, __m512 d, const struct pyllm_qact *x, int nb, int b, int t0,
                int T, __m512 *facc)
{
  for (int t = 0; t < T; t++) {
    int tt = t0 + t;
    const int8_t *xq = x->q + (long long)tt * x->cols + b * QK;
    __m512i a0, a1;
    dp_block(w, xq, &a0, &a1);
    __m512i acc = _mm512_sub_epi32(_mm512_add_epi32(a0, a1),
                                   _mm512_set1_epi32(16 * x->s[tt * nb + b]));
    __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(x->d[tt * nb + b]));
    facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), dd, facc[t]);
  }
}

// T tokens times blocks [b0, b0 + nblk) of a Q5X16 row group whose weights
// were unpacked to buf (8 vectors a block): out = (b0 ? out : 0) + their sum.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q5u_tile(const __m512i *buf, const uint8_t *rec0, int nb, int b0, int nblk,
         const struct pyllm_qact *x, int t0, int T, float *out, int ostride)
{
  __m512 facc[TILE];
  for (int t = 0; t < T; t++)
    facc[t] = b0 ? _mm512_loadu_ps(out + (long long)t * ostride) : _mm512_setzero_ps();
  for (int i = 0; i < nblk; i++) {
    int b = b0 + i;
    const __m512i *w = buf + 8 * i;
    __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec0 + q5x16_scales_at(nb, b))));
    q5_block_tokens(w, d, x, nb, b, t0, T, facc);
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q5x16_tile(const uint8_t *rec0, int nb, const struct pyllm_qact *x, int t0, int T,
           float *out, int ostride)
{
  __m512 facc[TILE];
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + q5x16_body_at(b), *sc = rec0 + q5x16_scales_at(nb, b);
    // a block's share of the stream (352 bytes: 6 prefetches of the 384 from
    // its place cover it), PF_AHEAD_Q4 blocks ahead
    const char *ahead = (const char *)rec0 + (long long)(b + PF_AHEAD_Q4) * PYLLM_Q5X16_RECORD;
    for (int p = 0; p < 384; p += 64)
      _mm_prefetch(ahead + p, _MM_HINT_T1);
    __m512i w[8];
    q5x16_unpack(rec, w);
    __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sc));
    q5_block_tokens(w, d, x, nb, b, t0, T, facc);
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
q8x16_tile(const uint8_t *rec0, int nb, const struct pyllm_qact *x, int t0, int T,
           float *out, int ostride)
{
  __m512 facc[TILE];
  for (int t = 0; t < T; t++)
    facc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const uint8_t *rec = rec0 + q8x16_qs_at(b), *sc = rec0 + q8x16_scales_at(nb, b);
    // a block's share of the stream (544 bytes, 8.5 lines: 9 prefetches
    // cover it wherever it starts), PF_AHEAD_Q8 blocks ahead
    const char *ahead = (const char *)rec0 + (long long)(b + PF_AHEAD_Q8) * Q8_SHARE;
    for (int p = 0; p < Q8_SHARE + 32; p += 64)
      _mm_prefetch(ahead + p, _MM_HINT_T1);
    __m512i w[8];
    for (int j = 0; j < 8; j++)
      w[j] = _mm512_load_si512(rec + 64 * j);
    __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sc));
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
      __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(x->d[tt * nb + b]));
      facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), dd, facc[t]);
    }
  }
  for (int t = 0; t < T; t++)
    _mm512_storeu_ps(out + (long long)t * ostride, facc[t]);
}

// Dispatch on the token count so every tile has a constant T.
#define TILE_CASES(fn)                                                   \
  switch (T) {                                                           \
  case 1: fn(rec, nb, x, t0, 1, o, rows); break;                         \
  case 2: fn(rec, nb, x, t0, 2, o, rows); break;                         \
  case 3: fn(rec, nb, x, t0, 3, o, rows); break;                         \
  case 4: fn(rec, nb, x, t0, 4, o, rows); break;                         \
  case 5: fn(rec, nb, x, t0, 5, o, rows); break;                         \
  case 6: fn(rec, nb, x, t0, 6, o, rows); break;                         \
  case 7: fn(rec, nb, x, t0, 7, o, rows); break;                         \
  default: fn(rec, nb, x, t0, 8, o, rows); break;                        \
  }

#define Q5U_SLAB 32  // blocks of a Q5X16 row group unpacked at a time (16 KB)

#define Q5U_CASES                                                                         \
  switch (T) {                                                                            \
  case 1: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 1, o, rows); break;                     \
  case 2: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 2, o, rows); break;                     \
  case 3: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 3, o, rows); break;                     \
  case 4: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 4, o, rows); break;                     \
  case 5: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 5, o, rows); break;                     \
  case 6: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 6, o, rows); break;                     \
  case 7: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 7, o, rows); break;                     \
  default: q5u_tile(buf, rec, nb, b0, nblk, x, t0, 8, o, rows); break;                    \
  }

// More tokens than a tile: each slab of a Q5X16 row group is unpacked once for
// every token tile, where q5x16_tile would rebuild the 5-bit values per tile
// (more work than the tile's products need per token in a long prompt).
static PYLLM_TARGET_AVX512 void
q5x16_group_many(const uint8_t *rec, int nb, const struct pyllm_qact *x, int g, float *out,
                 int rows)
{
  __m512i buf[8 * Q5U_SLAB];
  for (int b0 = 0; b0 < nb; b0 += Q5U_SLAB) {
    int nblk = nb - b0 < Q5U_SLAB ? nb - b0 : Q5U_SLAB;
    for (int i = 0; i < nblk; i++)
      q5x16_unpack(rec + q5x16_body_at(b0 + i), buf + 8 * i);
    for (int t0 = 0; t0 < x->n; t0 += TILE) {
      int T = x->n - t0 < TILE ? x->n - t0 : TILE;
      float *o = out + (long long)t0 * rows + g * 16;
      Q5U_CASES
    }
  }
}

static PYLLM_TARGET_AVX512 void
group_avx512(const struct pyllm_qmat *w, const struct pyllm_qact *x, int g, float *out,
             int rows)
{
  int nb = w->cols / QK;
  const uint8_t *rec = w->data + g * pyllm_qmat_bytes(w->type, 16, w->cols);
  if (w->type == PYLLM_Q5X16 && x->n > TILE) {
    q5x16_group_many(rec, nb, x, g, out, rows);
    return;
  }
  for (int t0 = 0; t0 < x->n; t0 += TILE) {
    int T = x->n - t0 < TILE ? x->n - t0 : TILE;
    float *o = out + (long long)t0 * rows + g * 16;
    if (w->type == PYLLM_Q4X16) {
      TILE_CASES(q4x16_tile)
    } else if (w->type == PYLLM_Q5X16) {
      TILE_CASES(q5x16_tile)
    } else {
      TILE_CASES(q8x16_tile)
    }
  }
}

static void
group_generic(const struct pyllm_qmat *w, const struct pyllm_qact *x, int g, float *out,
              int rows)
{
  int nb = w->cols / QK;
  const uint8_t *rec = w->data + g * pyllm_qmat_bytes(w->type, 16, w->cols);
  for (int t = 0; t < x->n; t++) {
    float *o = out + (long long)t * rows + g * 16;
    if (w->type == PYLLM_Q4X16)
      q4x16_generic(rec, nb, x, t, o);
    else if (w->type == PYLLM_Q5X16)
      q5x16_generic(rec, nb, x, t, o);
    else
      q8x16_generic(rec, nb, x, t, o);
  }
}

// ------------------------------------------------------------ driver

struct mm_job {
  const struct pyllm_qmat *w;
  const struct pyllm_qact *x;
  float *out;
  int ostride;           // floats between two tokens' rows of out
  int groups;  // row groups in the matrix
  int per;     // row groups per chunk
  int avx;
};

static void
mm_chunk(void *arg, int c)
{
  struct mm_job *j = arg;
  int end = (c + 1) * j->per < j->groups ? (c + 1) * j->per : j->groups;
  int k = j->w->type == PYLLM_Q4K16 || j->w->type == PYLLM_Q6K16;
  for (int g = c * j->per; g < end; g++) {
    if (k)
      kq_group(j->w, j->x, g, j->out, j->ostride, j->avx);
    else if (j->avx)
      group_avx512(j->w, j->x, g, j->out, j->ostride);
    else
      group_generic(j->w, j->x, g, j->out, j->ostride);
  }
}

static void
matmul_into(const struct pyllm_qmat *w, const struct pyllm_qact *x, float *out, int ostride)
{
  struct mm_job j = { w, x, out, ostride, w->rows / 16, 1, pyllm_use_avx512() };
  // chunks of ~64 KB of weight-token work, but at least 4 per thread so a
  // late or descheduled thread leaves little for the others to wait on
  long long gbytes = pyllm_qmat_bytes(w->type, 16, w->cols) * (x->n < TILE ? x->n : TILE);
  int per = (int)(65536 / (gbytes > 0 ? gbytes : 1));
  int maxper = j.groups / (4 * pyllm_get_threads());
  if (per > maxper)
    per = maxper;
  j.per = per < 1 ? 1 : per;
  pool_run_par(mm_chunk, &j, (j.groups + j.per - 1) / j.per);
}

// out[t][r] for t < x->n, r < w->rows; x->cols must equal w->cols.
void
pyllm_qmatmul(const struct pyllm_qmat *w, const struct pyllm_qact *x, float *out)
{
  if (w->type == PYLLM_Q8R16) {  // the course's per-row int8 matrices (rowq8.c)
    pyllm_q8r16_matmul(w, x, out);
    return;
  }
  if (pyllm_act_group(w) == 256 && x->group != 256) {  // K records need group-256 activations
    for (long long i = 0; i < (long long)x->n * w->rows; i++)
      out[i] = __builtin_nanf("");
    return;
  }
  if (w->type == PYLLM_PARTS) {  // each part's rows into its slice of every token's row
    int r0 = 0;
    for (int i = 0; i < w->nparts; i++) {
      matmul_into(&w->parts[i], x, out + r0, w->rows);
      r0 += w->parts[i].rows;
    }
  } else {
    matmul_into(w, x, out, w->rows);
  }
}
