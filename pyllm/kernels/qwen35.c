// qwen35.c: a Qwen3.5 forward pass on the fast path for a batch of rows that
// may belong to different sequences (a prompt chunk is rows of one sequence
// at consecutive positions; batched decode is one row per sequence), every
// matrix an int8 Q8X16 product (quant.h / matmul.c) over all rows at once:
// one pass over the weights per engine step, whatever mix of prefill chunks
// and decode rows it carries.
//
// The stages are those of pyllm/models/qwen35.py, whose numpy code is the
// readable reference (and, run with the same int8 matrices, the twin this
// file is tested against). Here the delta rule runs token by token (each
// sequence's rows in order, the heads in parallel): its cost is small next to
// the matrix products, and one call into C per step replaces ~600 numpy calls.

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <immintrin.h>

#include "gdn.h"
#include "kernels.h"
#include "ops.h"
#include "pool.h"
#include "quant.h"
#include "scratch.h"
#include "qwen35.h"
#include "vmath.h"

// Where decode time goes (seconds, summed over calls; pyllm_qwen35_profile).
enum { T_MATMUL, T_DELTANET, T_ATTENTION, T_OTHER, T_TOTAL, T_CALLS, T_N };
static double prof[T_N];

static inline double
now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Rows [row0[s], row0[s + 1]) belong to sequence s, in position order.
struct rows {
  int nseq;
  const int32_t *row0;  // [nseq + 1]
};

// Scratch of one call (the thread's buffer, scratch.h).
struct acts {
  float *x;       // residual stream [n][dim]
  float *xb;      // input of a matmul [n][wide]
  float *p;       // output of mix_in / gate-up [n][pw]
  float *qkv;     // DeltaNet q | k | v after conv [n][conv_dim]
  float *bg;      // DeltaNet beta [n][lv_heads], then g [n][lv_heads]
  float *tmp;     // output of mix_out / down [n][dim]
  float *sc;      // attention scores [n * n_heads][maxpos + 1]
  struct pyllm_qact qa;
};

static int
conv_dim(const struct pyllm_qwen35 *m)
{
  return 2 * m->lk_heads * m->lk_dim + m->lv_heads * m->lv_dim;
}

static int
max_rows(const struct pyllm_qwen35 *m)
{
  int w = 0;  // the LM head writes into the caller's logits, not here
  for (int l = 0; l < m->n_layers; l++) {
    w = m->mix_in[l].rows > w ? m->mix_in[l].rows : w;
    w = m->wgu[l].rows > w ? m->wgu[l].rows : w;
  }
  return w;
}

static int
alloc_acts(struct acts *a, const struct pyllm_qwen35 *m, int n, int maxpos)
{
  int wide = m->hidden;  // widest matmul input: hidden, value_dim or heads * head_dim
  if (m->lv_heads * m->lv_dim > wide)
    wide = m->lv_heads * m->lv_dim;
  if (m->n_heads * m->head_dim > wide)
    wide = m->n_heads * m->head_dim;
  if (m->dim > wide)
    wide = m->dim;
  int pw = max_rows(m);
  long long floats = (long long)n * (2 * m->dim + wide + pw + conv_dim(m) + 2 * m->lv_heads)
                     + (long long)n * m->n_heads * (maxpos + 1);
  memset(a, 0, sizeof(*a));
  if (!(a->x = pyllm_scratch_acts(floats, n, wide, &a->qa)))
    return -1;
  a->tmp = a->x + (long long)n * m->dim;
  a->xb = a->tmp + (long long)n * m->dim;
  a->p = a->xb + (long long)n * wide;
  a->qkv = a->p + (long long)n * pw;
  a->bg = a->qkv + (long long)n * conv_dim(m);
  a->sc = a->bg + (long long)n * 2 * m->lv_heads;
  return 0;
}


// out[n][w->rows] = W in[n][w->cols]: int8 activations, then the product.
static void
linear(const struct pyllm_qmat *w, const float *in, int n, struct pyllm_qact *qa, float *out)
{
  double t = now_s();
  pyllm_quantize_act_for(w, in, n, qa);
  pyllm_qmatmul(w, qa, out);
  prof[T_MATMUL] += now_s() - t;
}

// ------------------------------------------------------------ small vector ops

static inline float
sigmoid1(float x)
{
  return 1.0f / (1.0f + expf(-x));
}

static inline float
softplus1(float x)  // torch's: x itself above 20
{
  return x > 20.0f ? x : log1pf(expf(x));
}

static float
dot(const float *a, const float *b, int n)
{
  float acc[16] = { 0 }, s = 0;
  int k = 0;
  for (; k + 16 <= n; k += 16)  // 16 partial sums: vectorizes, fixed order
    for (int j = 0; j < 16; j++)
      acc[j] += a[k + j] * b[k + j];
  for (; k < n; k++)
    acc[0] += a[k] * b[k];
  for (int j = 0; j < 16; j++)
    s += acc[j];
  return s;
}

// x *= 1 / sqrt(sum x^2 + eps) (the DeltaNet q/k l2norm: eps inside the root)
static void
l2norm(float *x, int n, float eps)
{
  float r = 1.0f / sqrtf(dot(x, x, n) + eps);
  for (int k = 0; k < n; k++)
    x[k] *= r;
}

// x = x / rms(x) * w, in place (w already 1 + weight where that applies)
static void
rmsnorm_inplace(float *x, const float *w, int n, float eps)
{
  float r = 1.0f / sqrtf(dot(x, x, n) / (float)n + eps);
  for (int k = 0; k < n; k++)
    x[k] = x[k] * r * w[k];
}

// ------------------------------------------------------------ Gated DeltaNet

struct gdn_job {
  const struct pyllm_qwen35 *m;
  const struct pyllm_qwen35_seq *seqs;
  const struct rows *rows;
  const int32_t *pos;  // per row
  struct acts *a;
  int slot, pw;
};

// The snapshot row i of sequence s fills (see struct pyllm_qwen35_seq), or -1.
// A chunk asks for a handful, so a scan is cheaper than anything cleverer.
static int
snap_index(const struct gdn_job *j, int s, int i)
{
  const struct pyllm_qwen35_seq *sq = &j->seqs[s];
  if (sq->nsnap <= 0 || i == j->rows->row0[s + 1] - 1)
    return -1;
  for (int k = 0; k < sq->nsnap; k++)
    if (sq->snap_end[k] == j->pos[i] + 1)
      return k;
  return -1;
}

// Row i of sequence s (see gdn_prep).
static void
gdn_prep_row(struct gdn_job *j, int s, int i)
{
  const struct pyllm_qwen35 *m = j->m;
  int C = conv_dim(m), kd = m->lk_heads * m->lk_dim, vd = m->lv_heads * m->lv_dim;
  int H = m->lv_heads;
  float *p = j->a->p + (long long)i * j->pw, *qkv = j->a->qkv + (long long)i * C;
  float *conv = j->seqs[s].conv + (long long)j->slot * (m->conv_k - 1) * C;
  pyllm_gdn_conv(conv, p, 1, m->conv_w + (long long)j->slot * m->conv_k * C, C, m->conv_k,
                 qkv);
  int snap = snap_index(j, s, i);
  if (snap >= 0) {
    long long n = (long long)(m->conv_k - 1) * C;
    memcpy(j->seqs[s].snap_conv[snap] + j->slot * n, conv, sizeof(float) * n);
  }
  float qscale = 1.0f / sqrtf((float)m->lk_dim);
  for (int h = 0; h < m->lk_heads; h++) {
    float *q = qkv + h * m->lk_dim, *k = qkv + kd + h * m->lk_dim;
    l2norm(q, m->lk_dim, 1e-6f);
    l2norm(k, m->lk_dim, 1e-6f);
    for (int d = 0; d < m->lk_dim; d++)
      q[d] *= qscale;
  }
  const float *b = p + C + vd, *a = b + H;
  const float *na = m->neg_a + (long long)j->slot * H, *dt = m->dt_bias + (long long)j->slot * H;
  float *beta = j->a->bg + (long long)i * 2 * H, *g = beta + H;
  for (int h = 0; h < H; h++) {
    beta[h] = sigmoid1(b[h]);
    g[h] = na[h] * softplus1(a[h] + dt[h]);
  }
}

// Sequence s: for each of its rows in order, conv + SiLU (the conv state
// moves on one row at a time), l2norm of q and k heads, beta and g of every
// value head.
static void
gdn_prep(void *arg, int s)
{
  struct gdn_job *j = arg;
  for (int i = j->rows->row0[s]; i < j->rows->row0[s + 1]; i++)
    gdn_prep_row(j, s, i);
}

// o = o / rms(o) * w * silu(z) over 16 lanes, in the scalar loop's order of
// operations (only the exponential differs, by ~2e-7 relative: vmath.h).
static PYLLM_TARGET_AVX512 void
gated_norm_avx512(float *o, const float *w, const float *z, int dv, float r)
{
  __m512 rv = _mm512_set1_ps(r), one = _mm512_set1_ps(1.0f);
  for (int d = 0; d < dv; d += 16) {
    __m512 zv = _mm512_loadu_ps(z + d);
    __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, vexp512(_mm512_sub_ps(_mm512_setzero_ps(),
                                                                              zv))));
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(w + d), _mm512_mul_ps(_mm512_loadu_ps(o + d), rv));
    _mm512_storeu_ps(o + d, _mm512_mul_ps(a, _mm512_mul_ps(zv, sig)));
  }
}

// The gated RMSNorm of one value head's output: o = o / rms(o) * w * silu(z).
// (Vectorised: 128 scalar expf per head and token show in a Qwen3.5 prefill.)
static void
gated_norm(float *o, const float *w, const float *z, int dv, float eps)
{
  float r = 1.0f / sqrtf(dot(o, o, dv) / (float)dv + eps);
  if (pyllm_use_avx512() && dv % 16 == 0) {
    gated_norm_avx512(o, w, z, dv, r);
    return;
  }
  for (int d = 0; d < dv; d++)
    o[d] = w[d] * (o[d] * r) * (z[d] * sigmoid1(z[d]));
}

// (sequence, value head) c: the delta-rule step of each of the sequence's
// rows in order, then the gated RMSNorm into xb.
static void
gdn_heads(void *arg, int c)
{
  struct gdn_job *j = arg;
  const struct pyllm_qwen35 *m = j->m;
  int H = m->lv_heads, s = c / H, h = c % H, dk = m->lk_dim, dv = m->lv_dim;
  int C = conv_dim(m), kd = m->lk_heads * dk, vd = H * dv;
  // the q/k head serving this value head (qwen35.h: the two orders of value heads)
  int kh = m->v_tiled ? h % m->lk_heads : h / (H / m->lk_heads);
  float *S = j->seqs[s].ssm + ((long long)j->slot * H + h) * dk * dv;
  const float *w = m->gnorm + (long long)j->slot * dv;
  for (int i = j->rows->row0[s]; i < j->rows->row0[s + 1]; i++) {
    const float *qkv = j->a->qkv + (long long)i * C;
    const float *beta = j->a->bg + (long long)i * 2 * H, *g = beta + H;
    float *o = j->a->xb + (long long)i * vd + h * dv;
    gdn_head(S, qkv + kh * dk, qkv + kd + kh * dk, qkv + 2 * kd + h * dv, g[h], beta[h], dk,
             dv, o);
    gated_norm(o, w, j->a->p + (long long)i * j->pw + C + h * dv, dv, m->eps);
    int snap = snap_index(j, s, i);
    if (snap >= 0)
      memcpy(j->seqs[s].snap_ssm[snap] + ((long long)j->slot * H + h) * dk * dv, S,
             sizeof(float) * dk * dv);
  }
}

static void
deltanet(const struct pyllm_qwen35 *m, int l, int n, const struct rows *rows,
         const int32_t *pos, const struct pyllm_qwen35_seq *seqs, struct acts *a)
{
  const struct pyllm_qmat *in = &m->mix_in[l];
  linear(in, a->xb, n, &a->qa, a->p);
  double t = now_s();
  struct gdn_job j = { m, seqs, rows, pos, a, m->slot[l], in->rows };
  pool_run(gdn_prep, &j, rows->nseq);
  pool_run(gdn_heads, &j, rows->nseq * m->lv_heads);
  prof[T_DELTANET] += now_s() - t;
  linear(&m->mix_out[l], a->xb, n, &a->qa, a->tmp);
}

// ------------------------------------------------------------ gated attention

struct att_job {
  const struct pyllm_qwen35 *m;
  const struct pyllm_qwen35_seq *seqs;
  const int32_t *pos, *seq;  // per row: position, sequence
  struct acts *a;
  int slot, pw, maxpos;
};

// Row i: q/k (1+w) RMSNorm per head, partial RoPE, k and v into the cache.
static void
att_prep(void *arg, int i)
{
  struct att_job *j = arg;
  const struct pyllm_qwen35 *m = j->m;
  int hd = m->head_dim, H = m->n_heads, KV = m->n_kv_heads, half = m->rot_dim / 2;
  float *p = j->a->p + (long long)i * j->pw;  // [q0 | gate0 | q1 | gate1 ... | k | v]
  float *k = p + 2 * H * hd, *v = k + KV * hd;
  const float *qn = m->q_norm + (long long)j->slot * hd, *kn = m->k_norm + (long long)j->slot * hd;
  float c[half], s[half];
  for (int f = 0; f < half; f++) {
    float ang = (float)j->pos[i] * m->inv_freq[f];
    c[f] = cosf(ang);
    s[f] = sinf(ang);
  }
  for (int h = 0; h < H + KV; h++) {
    float *x = h < H ? p + h * 2 * hd : k + (h - H) * hd;
    rmsnorm_inplace(x, h < H ? qn : kn, hd, m->eps);
    for (int f = 0; f < half; f++) {  // rotate-half on the leading rot_dim dims
      float x0 = x[f], x1 = x[f + half];
      x[f] = x0 * c[f] - x1 * s[f];
      x[f + half] = x1 * c[f] + x0 * s[f];
    }
  }
  const struct pyllm_qwen35_seq *sq = &j->seqs[j->seq[i]];
  for (int h = 0; h < KV; h++) {
    long long at = (((long long)j->slot * KV + h) * sq->cap + j->pos[i]) * hd;
    memcpy(sq->k + at, k + h * hd, sizeof(float) * hd);
    memcpy(sq->v + at, v + h * hd, sizeof(float) * hd);
  }
}

// Scores s[t] = q . K[t] * scale for t < npos, and their maximum.
static float
scores_generic(const float *q, const float *K, int npos, int hd, float scale, float *s)
{
  float mx = -INFINITY;
  for (int t = 0; t < npos; t++) {
    s[t] = dot(q, K + (long long)t * hd, hd) * scale;
    mx = s[t] > mx ? s[t] : mx;
  }
  return mx;
}

// o = sum_t w[t] V[t]
static void
mix_generic(const float *w, const float *V, int npos, int hd, float *o)
{
  memset(o, 0, sizeof(float) * hd);
  for (int t = 0; t < npos; t++) {
    const float *vt = V + (long long)t * hd;
    for (int d = 0; d < hd; d++)
      o[d] += w[t] * vt[d];
  }
}

// hd % 16 == 0, hd <= 512
PYLLM_TARGET_AVX512 static float
scores_avx512(const float *q, const float *K, int npos, int hd, float scale, float *s)
{
  __m512 qv[32];
  for (int d = 0; d < hd / 16; d++)
    qv[d] = _mm512_loadu_ps(q + 16 * d);
  float mx = -INFINITY;
  for (int t = 0; t < npos; t++) {
    const float *kt = K + (long long)t * hd;
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < hd / 16; d++)
      acc = _mm512_fmadd_ps(qv[d], _mm512_loadu_ps(kt + 16 * d), acc);
    s[t] = _mm512_reduce_add_ps(acc) * scale;
    mx = s[t] > mx ? s[t] : mx;
  }
  return mx;
}

PYLLM_TARGET_AVX512 static void
mix_avx512(const float *w, const float *V, int npos, int hd, float *o)
{
  __m512 acc[32];
  for (int d = 0; d < hd / 16; d++)
    acc[d] = _mm512_setzero_ps();
  for (int t = 0; t < npos; t++) {
    const float *vt = V + (long long)t * hd;
    __m512 wt = _mm512_set1_ps(w[t]);
    for (int d = 0; d < hd / 16; d++)
      acc[d] = _mm512_fmadd_ps(wt, _mm512_loadu_ps(vt + 16 * d), acc[d]);
  }
  for (int d = 0; d < hd / 16; d++)
    _mm512_storeu_ps(o + 16 * d, acc[d]);
}

// (row, query head) c: softmax(q K^T / sqrt(hd)) V over positions 0..pos,
// times the sigmoid output gate, into xb. Every row's k, v are in its cache
// before any row attends (att_prep ran first), so the rows of a prompt chunk
// see each other causally.
static void
att_heads(void *arg, int c)
{
  struct att_job *j = arg;
  const struct pyllm_qwen35 *m = j->m;
  int hd = m->head_dim, H = m->n_heads, KV = m->n_kv_heads, i = c / H, h = c % H;
  int kvh = h / (H / KV), npos = j->pos[i] + 1;
  int avx = pyllm_use_avx512() && hd % 16 == 0 && hd <= 512;
  const float *p = j->a->p + (long long)i * j->pw;
  const float *q = p + h * 2 * hd, *gate = q + hd;
  const struct pyllm_qwen35_seq *sq = &j->seqs[j->seq[i]];
  const float *K = sq->k + ((long long)j->slot * KV + kvh) * sq->cap * hd;
  const float *V = sq->v + ((long long)j->slot * KV + kvh) * sq->cap * hd;
  float *sc = j->a->sc + (long long)c * (j->maxpos + 1), sum = 0;
  float scale = 1.0f / sqrtf((float)hd);
  float mx = avx ? scores_avx512(q, K, npos, hd, scale, sc)
                 : scores_generic(q, K, npos, hd, scale, sc);
  for (int t = 0; t < npos; t++) {
    sc[t] = expf(sc[t] - mx);
    sum += sc[t];
  }
  float inv = 1.0f / sum;
  for (int t = 0; t < npos; t++)
    sc[t] *= inv;
  float *o = j->a->xb + (long long)i * H * hd + h * hd;
  if (avx)
    mix_avx512(sc, V, npos, hd, o);
  else
    mix_generic(sc, V, npos, hd, o);
  for (int d = 0; d < hd; d++)
    o[d] *= sigmoid1(gate[d]);
}

static void
attention(const struct pyllm_qwen35 *m, int l, int n, const int32_t *pos, const int32_t *seq,
          const struct pyllm_qwen35_seq *seqs, int maxpos, struct acts *a)
{
  const struct pyllm_qmat *in = &m->mix_in[l];
  linear(in, a->xb, n, &a->qa, a->p);
  double t = now_s();
  struct att_job j = { m, seqs, pos, seq, a, m->slot[l], in->rows, maxpos };
  pool_run(att_prep, &j, n);
  pool_run(att_heads, &j, n * m->n_heads);
  prof[T_ATTENTION] += now_s() - t;
  linear(&m->mix_out[l], a->xb, n, &a->qa, a->tmp);
}

// ------------------------------------------------------------ the forward pass

// Row i of sequence seq[i] at position pos[i]; the rows of a sequence must be
// consecutive and in position order. -2 if they are not, or a position or
// token is out of range; else fills row0 (nseq + 1 entries) and *maxpos.
static int
check_rows(const struct pyllm_qwen35 *m, int n, const int32_t *tokens, const int32_t *pos,
           const int32_t *seq, int nseq, const struct pyllm_qwen35_seq *seqs, int32_t *row0,
           int *maxpos)
{
  int s = -1;
  *maxpos = 0;
  for (int i = 0; i < n; i++) {
    if (seq[i] < 0 || seq[i] >= nseq || tokens[i] < 0 || tokens[i] >= m->vocab)
      return -2;
    if (seq[i] != s) {  // the first row of the next sequence
      if (seq[i] != s + 1)
        return -2;
      row0[++s] = i;
      if (seqs[s].nsnap > 0 && (!seqs[s].snap_end || !seqs[s].snap_conv || !seqs[s].snap_ssm))
        return -2;
    } else if (pos[i] != pos[i - 1] + 1) {
      return -2;
    }
    if (pos[i] < 0 || pos[i] >= seqs[s].cap)
      return -2;
    *maxpos = pos[i] > *maxpos ? pos[i] : *maxpos;
  }
  if (s != nseq - 1)
    return -2;
  row0[nseq] = n;
  return 0;
}

// Run n rows (token, position, sequence) through the model, nseq sequences
// of consecutive rows; write the logits of rows out_rows[0..n_out) to
// logits[n_out][head->rows] (the LM head runs only for those). Returns 0, -1
// if out of memory, -2 on a bad argument (see check_rows).
int
pyllm_qwen35_forward(const struct pyllm_qwen35 *m, int n, const int32_t *tokens,
                     const int32_t *pos, const int32_t *seq, int nseq,
                     const struct pyllm_qwen35_seq *seqs, int n_out, const int32_t *out_rows,
                     float *logits)
{
  int dim = m->dim, maxpos;
  if (n < 1 || nseq < 1 || n_out < 0)
    return -2;
  int32_t *row0 = malloc(sizeof(int32_t) * (nseq + 1));
  if (!row0)
    return -1;
  int rc = check_rows(m, n, tokens, pos, seq, nseq, seqs, row0, &maxpos);
  for (int o = 0; rc == 0 && o < n_out; o++)
    if (out_rows[o] < 0 || out_rows[o] >= n)
      rc = -2;
  if (rc != 0) {
    free(row0);
    return rc;
  }
  struct rows rows = { nseq, row0 };
  double t0 = now_s(), inner0 = prof[T_MATMUL] + prof[T_DELTANET] + prof[T_ATTENTION];
  struct acts a;
  if (alloc_acts(&a, m, n, maxpos) < 0) {
    free(row0);
    return -1;
  }

  // token embeddings (bf16 rows convert exactly)
  for (int i = 0; i < n; i++) {
    float *x = a.x + (long long)i * dim;
    if (m->embd_bf16) {
      const uint16_t *e = m->embd_bf16 + (long long)tokens[i] * dim;
      for (int d = 0; d < dim; d++) {
        uint32_t u = (uint32_t)e[d] << 16;
        memcpy(x + d, &u, 4);
      }
    } else {
      memcpy(x, m->embd_f32 + (long long)tokens[i] * dim, sizeof(float) * dim);
    }
  }

  for (int l = 0; l < m->n_layers; l++) {
    // token mixer on the normalised stream, residual
    pyllm_rmsnorm(a.x, m->norm1 + (long long)l * dim, a.xb, n, dim, m->eps);
    if (m->kind[l] == 0)
      deltanet(m, l, n, &rows, pos, seqs, &a);
    else
      attention(m, l, n, pos, seq, seqs, maxpos, &a);
    for (long long k = 0; k < (long long)n * dim; k++)
      a.x[k] += a.tmp[k];

    // SwiGLU MLP, residual
    pyllm_rmsnorm(a.x, m->norm2 + (long long)l * dim, a.xb, n, dim, m->eps);
    linear(&m->wgu[l], a.xb, n, &a.qa, a.p);
    pyllm_silu_mul(a.p, n, m->hidden, a.xb);
    linear(&m->wdown[l], a.xb, n, &a.qa, a.tmp);
    for (long long k = 0; k < (long long)n * dim; k++)
      a.x[k] += a.tmp[k];
  }

  // final norm and the LM head, only for the rows whose logits are wanted
  for (int o = 0; o < n_out; o++)
    pyllm_rmsnorm(a.x + (long long)out_rows[o] * dim, m->out_norm, a.xb + (long long)o * dim,
                  1, dim, m->eps);
  if (n_out > 0)
    linear(m->head, a.xb, n_out, &a.qa, logits);
  free(row0);
  double total = now_s() - t0;
  prof[T_TOTAL] += total;
  prof[T_OTHER] += total - (prof[T_MATMUL] + prof[T_DELTANET] + prof[T_ATTENTION] - inner0);
  prof[T_CALLS] += 1;
  return 0;
}

// out[6] = seconds in int8 matmuls, DeltaNet (conv, state update, norm),
// attention, everything else, total, and the number of calls; reset after
// reading if asked. Not thread-safe (the engine decodes on one thread).
void
pyllm_qwen35_profile(double *out, int reset)
{
  for (int i = 0; i < T_N; i++) {
    out[i] = prof[i];
    if (reset)
      prof[i] = 0;
  }
}
