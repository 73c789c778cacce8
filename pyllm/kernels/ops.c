// ops.c: RMSNorm, RoPE, attention over the KV cache, SwiGLU and the embedding
// lookup. Attention and SiLU have an AVX-512 path (chosen at run time, see
// kernels.h) and a plain C one; both compute the same formulas.

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "ops.h"
#include "pool.h"
#include "vmath.h"

// out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w, for n rows of dim.
void
pyllm_rmsnorm(const float *x, const float *w, float *out, int n, int dim, float eps)
{
  for (int i = 0; i < n; i++) {
    const float *xi = x + (long long)i * dim;
    float *oi = out + (long long)i * dim;
    float acc[16] = { 0 }, ss = 0;
    for (int k = 0; k + 16 <= dim; k += 16)  // 16 partial sums: vectorizes, fixed order
      for (int j = 0; j < 16; j++)
        acc[j] += xi[k + j] * xi[k + j];
    for (int k = dim / 16 * 16; k < dim; k++)
      acc[0] += xi[k] * xi[k];
    for (int j = 0; j < 16; j++)
      ss += acc[j];
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int k = 0; k < dim; k++)
      oi[k] = xi[k] * scale * w[k];
  }
}

// cos/sin of pos[i] * theta^(-2j/hd) for j < hd/2: tables [n][hd/2].
void
rope_tables(const int32_t *pos, int n, int head_dim, float theta, float *c, float *s)
{
  int half = head_dim / 2;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < half; j++) {
      double ang = pos[i] * pow(theta, -2.0 * j / head_dim);
      c[i * half + j] = (float)cos(ang);
      s[i * half + j] = (float)sin(ang);
    }
}

// Rotate adjacent pairs (x[2j], x[2j+1]) of every head of n rows by the
// angles of rope_tables: GGUF stores Q/K rows permuted for this interleaved
// form (smollm2.md, "the RoPE trap").
void
rope_apply(float *x, int n, int stride, int n_heads, int head_dim, const float *c,
           const float *s)
{
  int half = head_dim / 2;
  for (int i = 0; i < n; i++)
    for (int h = 0; h < n_heads; h++) {
      float *v = x + (long long)i * stride + h * head_dim;
      const float *ci = c + i * half, *si = s + i * half;
      for (int j = 0; j < half; j++) {
        float a = v[2 * j], b = v[2 * j + 1];
        v[2 * j] = a * ci[j] - b * si[j];
        v[2 * j + 1] = a * si[j] + b * ci[j];
      }
    }
}

void
pyllm_rope(float *x, int n, int stride, int n_heads, int head_dim, const int32_t *pos,
           float theta)
{
  int half = head_dim / 2;
  float c[n * half], s[n * half];
  rope_tables(pos, n, head_dim, theta, c, s);
  rope_apply(x, n, stride, n_heads, head_dim, c, s);
}

// ------------------------------------------------------------ attention

#define MAXGROUP 8  // query heads per KV head

#define KB PYLLM_KV_BLOCK

static void
attend_generic(const float *q, const float *k, const float *v, long long bs, int npos,
               int group, int hd, float *out, float *sc)
{
  float scale = 1.0f / sqrtf((float)hd);
  for (int h = 0; h < group; h++) {
    float *s = sc + (long long)h * npos, mx = -INFINITY, sum = 0;
    for (int t = 0; t < npos; t++)
      s[t] = 0;
    for (int t0 = 0; t0 < npos; t0 += KB) {  // scores, one key block at a time
      const float *blk = k + (long long)(t0 / KB) * bs;
      int tn = npos - t0 < KB ? npos - t0 : KB;
      for (int d = 0; d < hd; d++) {
        float qd = q[h * hd + d];
        for (int t = 0; t < tn; t++)
          s[t0 + t] += qd * blk[d * KB + t];
      }
    }
    for (int t = 0; t < npos; t++) {
      s[t] *= scale;
      mx = s[t] > mx ? s[t] : mx;
    }
    for (int t = 0; t < npos; t++) {
      s[t] = expf(s[t] - mx);
      sum += s[t];
    }
    float inv = 1.0f / sum;
    float *o = out + h * hd;
    memset(o, 0, sizeof(float) * hd);
    for (int t = 0; t < npos; t++) {
      float a = s[t] * inv;
      const float *vt = v + (long long)(t / KB) * bs + (long long)(t % KB) * hd;
      for (int d = 0; d < hd; d++)
        o[d] += a * vt[d];
    }
  }
}

#define REG_GROUP 6  // query heads whose scores of a key block fit in registers

// Scores of G query heads (G a constant at each call site) against one key
// block (KB = 64 positions, 4 vectors, masked past npos): the G x 4 sums stay
// in registers for the whole walk over the head dims, each key row is loaded
// once for all heads. Each sum is accumulated over d in order, as in the
// score-buffer loop below, so both give the same bits.
static inline __attribute__((always_inline)) PYLLM_TARGET_AVX512 void
scores_block(const float *q, const float *blk, int hd, int t0, int npos, int padded, int G,
             float *sc)
{
  __m512 acc[REG_GROUP][KB / 16];
  __mmask16 m[KB / 16];
  for (int j = 0; j < KB / 16; j++) {
    int left = npos - t0 - 16 * j;
    m[j] = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    for (int h = 0; h < G; h++)
      acc[h][j] = _mm512_setzero_ps();
  }
  for (int d = 0; d < hd; d++) {
    const float *kd = blk + (long long)d * KB;
    __m512 kv[KB / 16];
    for (int j = 0; j < KB / 16; j++)
      kv[j] = _mm512_maskz_loadu_ps(m[j], kd + 16 * j);
    for (int h = 0; h < G; h++) {
      __m512 qh = _mm512_set1_ps(q[h * hd + d]);
      for (int j = 0; j < KB / 16; j++)
        acc[h][j] = _mm512_fmadd_ps(qh, kv[j], acc[h][j]);
    }
  }
  for (int j = 0; j < KB / 16 && t0 + 16 * j < padded; j++)
    for (int h = 0; h < G; h++)
      _mm512_storeu_ps(sc + (long long)h * padded + t0 + 16 * j, acc[h][j]);
}

static PYLLM_TARGET_AVX512 void
attend_avx512(const float *q, const float *k, const float *v, long long bs, int npos,
              int group, int hd, float *out, float *sc)
{
  int padded = (npos + 15) & ~15;
  float scale = 1.0f / sqrtf((float)hd);
  // scores: for each key block, walk the head dims; each block row is
  // contiguous. Up to REG_GROUP heads, the block's sums stay in registers;
  // beyond, in the score buffer (L1).
  for (int t0 = 0; t0 < padded && group <= REG_GROUP; t0 += KB) {
    const float *blk = k + (long long)(t0 / KB) * bs;
    switch (group) {
    case 1: scores_block(q, blk, hd, t0, npos, padded, 1, sc); break;
    case 2: scores_block(q, blk, hd, t0, npos, padded, 2, sc); break;
    case 3: scores_block(q, blk, hd, t0, npos, padded, 3, sc); break;
    case 4: scores_block(q, blk, hd, t0, npos, padded, 4, sc); break;
    case 5: scores_block(q, blk, hd, t0, npos, padded, 5, sc); break;
    default: scores_block(q, blk, hd, t0, npos, padded, 6, sc); break;
    }
  }
  for (int t0 = 0; t0 < padded && group > REG_GROUP; t0 += KB) {
    int tn = padded - t0 < KB ? padded - t0 : KB;
    const float *blk = k + (long long)(t0 / KB) * bs;
    for (int h = 0; h < group; h++)
      memset(sc + (long long)h * padded + t0, 0, sizeof(float) * tn);
    for (int d = 0; d < hd; d++) {
      const float *kd = blk + (long long)d * KB;
      for (int t = 0; t < tn; t += 16) {
        __mmask16 m = npos - t0 - t >= 16 ? 0xFFFF
                      : npos - t0 - t <= 0 ? 0 : (__mmask16)((1u << (npos - t0 - t)) - 1);
        __m512 kv = _mm512_maskz_loadu_ps(m, kd + t);
        for (int h = 0; h < group; h++) {
          float *sp = sc + (long long)h * padded + t0 + t;
          _mm512_storeu_ps(sp, _mm512_fmadd_ps(_mm512_set1_ps(q[h * hd + d]), kv,
                                               _mm512_loadu_ps(sp)));
        }
      }
    }
  }
  // softmax per head over the valid positions (padding lanes become 0)
  for (int h = 0; h < group; h++) {
    float *s = sc + (long long)h * padded;
    __m512 mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
    __m512 sv = _mm512_set1_ps(scale);
    for (int t = 0; t < padded; t += 16) {
      __mmask16 m = npos - t >= 16 ? 0xFFFF : (__mmask16)((1u << (npos - t)) - 1);
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + t), sv);
      _mm512_storeu_ps(s + t, x);
      mx = _mm512_mask_max_ps(mx, m, mx, x);
    }
    __m512 mxv = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    for (int t = 0; t < padded; t += 16) {
      __mmask16 m = npos - t >= 16 ? 0xFFFF : (__mmask16)((1u << (npos - t)) - 1);
      __m512 e = _mm512_maskz_mov_ps(m, vexp512(_mm512_sub_ps(_mm512_loadu_ps(s + t), mxv)));
      _mm512_storeu_ps(s + t, e);
      sum = _mm512_add_ps(sum, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int t = 0; t < padded; t += 16)
      _mm512_storeu_ps(s + t, _mm512_mul_ps(_mm512_loadu_ps(s + t), inv));
  }
  // out = sum_t p[t] v[t]: each value row is read once for the whole group
  for (int d0 = 0; d0 < hd; d0 += 64) {
    int dn = hd - d0 < 64 ? (hd - d0) / 16 : 4;
    __m512 o[MAXGROUP][4];
    for (int h = 0; h < group; h++)
      for (int j = 0; j < 4; j++)
        o[h][j] = _mm512_setzero_ps();
    for (int t = 0; t < npos; t++) {
      const float *vt = v + (long long)(t / KB) * bs + (long long)(t % KB) * hd + d0;
      for (int j = 0; j < dn; j++) {
        __m512 x = _mm512_loadu_ps(vt + 16 * j);
        for (int h = 0; h < group; h++)
          o[h][j] = _mm512_fmadd_ps(_mm512_set1_ps(sc[(long long)h * padded + t]), x, o[h][j]);
      }
    }
    for (int h = 0; h < group; h++)
      for (int j = 0; j < dn; j++)
        _mm512_storeu_ps(out + h * hd + d0 + 16 * j, o[h][j]);
  }
}

void
attend_group(const float *q, const float *k, const float *v, long long block_stride, int pos,
             int group, int head_dim, float *out)
{
  int npos = pos + 1, padded = (npos + 15) & ~15;
  float sc[group * padded];
  if (pyllm_use_avx512() && head_dim % 16 == 0 && group <= MAXGROUP)
    attend_avx512(q, k, v, block_stride, npos, group, head_dim, out, sc);
  else
    attend_generic(q, k, v, block_stride, npos, group, head_dim, out, sc);
}

struct att_job {
  const float *q, *k, *v;
  long long bs;
  const int32_t *pos;
  int qstride, ostride, n_heads, n_kv_heads, head_dim;
  float *out;
};

static void
att_chunk(void *arg, int c)
{
  struct att_job *j = arg;
  int i = c / j->n_kv_heads, kvh = c % j->n_kv_heads, group = j->n_heads / j->n_kv_heads;
  long long head = (long long)kvh * j->head_dim * KB;  // kv head kvh within a block
  attend_group(j->q + (long long)i * j->qstride + kvh * group * j->head_dim, j->k + head,
               j->v + head, j->bs, j->pos[i], group, j->head_dim,
               j->out + (long long)i * j->ostride + kvh * group * j->head_dim);
}

// Causal attention of n query rows of one sequence: row i sees positions
// 0..pos[i] of one layer of the paged cache (k, v: block 0 of KV head 0).
void
pyllm_attention(const float *q, int qstride, const float *k, const float *v,
                long long block_stride, const int32_t *pos, int n, int n_heads,
                int n_kv_heads, int head_dim, float *out, int ostride)
{
  struct att_job j = { q, k, v, block_stride, pos, qstride, ostride, n_heads, n_kv_heads,
                       head_dim, out };
  pool_run(att_chunk, &j, n * n_kv_heads);
}

// ------------------------------------------------------------ SwiGLU, embedding

static PYLLM_TARGET_AVX512 void
silu_avx512(const float *g, const float *u, int n, float *o)
{
  int k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 gv = _mm512_loadu_ps(g + k);
    __m512 e = vexp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
    _mm512_storeu_ps(o + k, _mm512_mul_ps(_mm512_div_ps(gv, den), _mm512_loadu_ps(u + k)));
  }
  for (; k < n; k++)
    o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
}

void
silu_mul_rows(const float *gu, int i0, int i1, int hidden, float *out)
{
  int avx = pyllm_use_avx512();
  for (int i = i0; i < i1; i++) {
    const float *g = gu + (long long)i * 2 * hidden, *u = g + hidden;
    float *o = out + (long long)i * hidden;
    if (avx) {
      silu_avx512(g, u, hidden, o);
      continue;
    }
    for (int k = 0; k < hidden; k++)
      o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
  }
}

// SwiGLU: out[i][k] = silu(gate[i][k]) * up[i][k], gu[i] = [gate | up].
void
pyllm_silu_mul(const float *gu, int n, int hidden, float *out)
{
  silu_mul_rows(gu, 0, n, hidden, out);
}

// Rows of a GGUF Q8_0 embedding table -> f32 (exactly as quants.dequant_q8_0).
void
pyllm_embed_q8_0(const uint8_t *table, int dim, const int32_t *tokens, int n, float *out)
{
  int nb = dim / 32;
  for (int i = 0; i < n; i++) {
    const uint8_t *row = table + (long long)tokens[i] * nb * 34;
    for (int b = 0; b < nb; b++) {
      _Float16 h;
      memcpy(&h, row + b * 34, 2);
      float d = (float)h;
      const int8_t *qs = (const int8_t *)(row + b * 34 + 2);
      for (int k = 0; k < 32; k++)
        out[(long long)i * dim + b * 32 + k] = (float)qs[k] * d;
    }
  }
}

// ------------------------------------------------------------ argmax

static int
argmax_scalar(const float *row, int n)
{
  int best = 0;
  for (int v = 1; v < n; v++)
    if (row[v] > row[best])
      best = v;
  return best;
}

// Two passes: the maximum 16 lanes at a time, then its first position. A row
// with a NaN goes to the scalar loop, whose order of comparisons defines the
// answer (vmaxps lets a NaN through or not by operand order).
static PYLLM_TARGET_AVX512 int
argmax_avx512(const float *row, int n)
{
  __m512 mx = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  int v = 0;
  for (; v + 16 <= n; v += 16) {
    __m512 x = _mm512_loadu_ps(row + v);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    mx = _mm512_max_ps(mx, x);
  }
  float m = _mm512_reduce_max_ps(mx);
  for (; v < n; v++) {
    if (row[v] != row[v])
      nan = 1;
    m = row[v] > m ? row[v] : m;
  }
  if (nan)
    return argmax_scalar(row, n);
  __m512 mv = _mm512_set1_ps(m);
  for (v = 0; v + 16 <= n; v += 16) {
    __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + v), mv, _CMP_EQ_OQ);
    if (hit)
      return v + __builtin_ctz(hit);
  }
  for (; v < n; v++)
    if (row[v] == m)
      return v;
  return 0;  // not reached: m is one of the row's values
}

void
pyllm_argmax_rows(const float *x, int n, int cols, int32_t *out)
{
  int avx = pyllm_use_avx512() && cols >= 16;
  for (int i = 0; i < n; i++) {
    const float *row = x + (long long)i * cols;
    out[i] = avx ? argmax_avx512(row, cols) : argmax_scalar(row, cols);
  }
}
