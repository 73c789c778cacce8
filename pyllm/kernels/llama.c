// llama.c: the Llama forward pass on the fast path, for a batch of rows that
// may belong to different sequences (a prompt chunk is rows of one sequence
// at consecutive positions; batched decode is one row per sequence).
//
// The stages are the ones of pyllm/models/llama.py, whose numpy code is the
// readable reference; this file exists so a decode step is one call into C
// (the GIL is released once per token, not ~200 times, which matters when the
// emulator thread wants it too).

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "llama.h"
#include "ops.h"
#include "pool.h"
#include "quant.h"
#include "scratch.h"

#define ROWS_PER_CHUNK 4  // rows per pool chunk for the row-wise ops

// Scratch of one call (the thread's buffer, scratch.h): activations [n][width]
// and the RoPE tables.
struct acts {
  float *x;     // residual stream [n][dim]
  float *xb;    // input of a matmul [n][max(dim, hidden)]
  float *qkv;   // [n][dim + 2 kv_dim]
  float *att;   // attention output [n][dim]
  float *gu;    // gate | up [n][2 hidden]
  float *tmp;   // matmul output added to x [n][dim]
  float *cos;   // RoPE [n][head_dim / 2]
  float *sin;
  struct pyllm_qact qa;
};

static int
alloc_acts(struct acts *a, const struct pyllm_llama *m, int n)
{
  int kvd = m->n_kv_heads * m->head_dim, wide = m->hidden > m->dim ? m->hidden : m->dim;
  long long floats = (long long)n * (m->dim * 4 + wide + 2 * kvd + 2 * m->hidden + m->head_dim);
  memset(a, 0, sizeof(*a));
  if (!(a->x = pyllm_scratch_acts(floats, n, wide, &a->qa)))
    return -1;
  a->xb = a->x + (long long)n * m->dim;
  a->qkv = a->xb + (long long)n * wide;
  a->att = a->qkv + (long long)n * (m->dim + 2 * kvd);
  a->gu = a->att + (long long)n * m->dim;
  a->tmp = a->gu + (long long)n * 2 * m->hidden;
  a->cos = a->tmp + (long long)n * m->dim;
  a->sin = a->cos + (long long)n * m->head_dim / 2;
  return 0;
}


// ------------------------------------------------------------ row-parallel helpers

struct rows_job {
  int op;  // 0 = quantize, 1 = SwiGLU
  const float *in;
  int n, cols;
  struct pyllm_qact *qa;
  float *out;
};

static void
rows_chunk(void *arg, int c)
{
  struct rows_job *j = arg;
  int i0 = c * ROWS_PER_CHUNK, i1 = i0 + ROWS_PER_CHUNK < j->n ? i0 + ROWS_PER_CHUNK : j->n;
  if (j->op == 0)
    quantize_rows(j->in, i0, i1, j->cols, j->qa);
  else
    silu_mul_rows(j->in, i0, i1, j->cols, j->out);
}

static void
rows_run(struct rows_job *j)
{
  pool_run(rows_chunk, j, (j->n + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK);
}

// out[n][w->rows] = W in[n][w->cols], quantizing the activations first.
static void
linear(const struct pyllm_qmat *w, const float *in, int n, struct pyllm_qact *qa, float *out)
{
  struct rows_job j = { 0, in, n, w->cols, qa, 0 };
  qa->group = pyllm_act_group(w);
  rows_run(&j);
  qa->n = n;
  qa->cols = w->cols;
  pyllm_qmatmul(w, qa, out);
}

// ------------------------------------------------------------ attention

struct kv_job {
  const struct pyllm_llama *m;
  const struct pyllm_seq *seqs;
  const int32_t *seq, *pos;
  const float *qkv;
  float *att;
  int layer;
};

// Attention of row c / n_kv_heads for the query heads of KV head c % n_kv_heads.
static void
kv_attend(void *arg, int c)
{
  struct kv_job *j = arg;
  const struct pyllm_llama *m = j->m;
  int i = c / m->n_kv_heads, kvh = c % m->n_kv_heads, group = m->n_heads / m->n_kv_heads;
  int hd = m->head_dim, qkvw = m->dim + 2 * m->n_kv_heads * hd;
  const struct pyllm_seq *s = &j->seqs[j->seq[i]];
  long long at = ((long long)j->layer * m->n_kv_heads + kvh) * hd * PYLLM_KV_BLOCK;
  long long bs = (long long)m->n_layers * m->n_kv_heads * hd * PYLLM_KV_BLOCK;
  attend_group(j->qkv + (long long)i * qkvw + kvh * group * hd, s->k + at, s->v + at, bs,
               j->pos[i], group, hd, j->att + (long long)i * m->dim + kvh * group * hd);
}

// k of every row into its sequence's cache (blocked and transposed, ops.h),
// v as rows ([kv head][pos][dim]), at the row's position.
static void
store_kv(const struct pyllm_llama *m, int l, int n, const float *qkv, const int32_t *pos,
         const int32_t *seq, const struct pyllm_seq *seqs)
{
  int hd = m->head_dim, kvd = m->n_kv_heads * hd, qkvw = m->dim + 2 * kvd;
  long long bs = (long long)m->n_layers * m->n_kv_heads * hd * PYLLM_KV_BLOCK;
  for (int i = 0; i < n; i++) {
    const struct pyllm_seq *s = &seqs[seq[i]];
    int blk = pos[i] / PYLLM_KV_BLOCK, off = pos[i] % PYLLM_KV_BLOCK;
    for (int h = 0; h < m->n_kv_heads; h++) {
      long long at = blk * bs + ((long long)l * m->n_kv_heads + h) * hd * PYLLM_KV_BLOCK;
      const float *k = qkv + (long long)i * qkvw + m->dim + h * hd, *v = k + kvd;
      for (int d = 0; d < hd; d++)
        s->k[at + (long long)d * PYLLM_KV_BLOCK + off] = k[d];
      memcpy(s->v + at + (long long)off * hd, v, sizeof(float) * hd);
    }
  }
}

// ------------------------------------------------------------ the forward pass

// Run n rows (token, position, sequence) through the model; write the logits
// of rows out_rows[0..n_out) to logits[n_out][vocab], and, if greedy is not
// NULL, each of those rows' argmax (lowest id on ties) to greedy[n_out] -- so
// a greedy decode step needs no second trip through Python. Each row's K/V go
// into its sequence's cache at its position before any row attends, so rows
// of one prompt chunk see each other causally. Returns 0, or -1 if out of
// memory.
int
pyllm_llama_forward(const struct pyllm_llama *m, int n, const int32_t *tokens,
                    const int32_t *pos, const int32_t *seq, const struct pyllm_seq *seqs,
                    int n_out, const int32_t *out_rows, float *logits, int32_t *greedy)
{
  struct acts a;
  int dim = m->dim, hd = m->head_dim, qkvw = dim + 2 * m->n_kv_heads * hd;
  if (alloc_acts(&a, m, n) < 0)
    return -1;

  // token embeddings, RoPE angles of every row
  if (m->embd_q8_0)
    pyllm_embed_q8_0(m->embd_q8_0, dim, tokens, n, a.x);
  else
    for (int i = 0; i < n; i++)
      memcpy(a.x + (long long)i * dim, m->embd_f32 + (long long)tokens[i] * dim,
             sizeof(float) * dim);
  rope_tables(pos, n, hd, m->theta, a.cos, a.sin);

  for (int l = 0; l < m->n_layers; l++) {
    // attention: rmsnorm, fused q|k|v projection, RoPE on q and k
    pyllm_rmsnorm(a.x, m->attn_norm + (long long)l * dim, a.xb, n, dim, m->eps);
    linear(&m->wqkv[l], a.xb, n, &a.qa, a.qkv);
    rope_apply(a.qkv, n, qkvw, m->n_heads, hd, a.cos, a.sin);
    rope_apply(a.qkv + dim, n, qkvw, m->n_kv_heads, hd, a.cos, a.sin);

    // cache k, v; scaled dot-product attention per (row, kv head); output
    // projection; residual
    store_kv(m, l, n, a.qkv, pos, seq, seqs);
    struct kv_job kj = { m, seqs, seq, pos, a.qkv, a.att, l };
    pool_run(kv_attend, &kj, n * m->n_kv_heads);
    linear(&m->wo[l], a.att, n, &a.qa, a.tmp);
    for (long long k = 0; k < (long long)n * dim; k++)
      a.x[k] += a.tmp[k];

    // feed-forward: rmsnorm, fused gate|up, SwiGLU, down projection, residual
    pyllm_rmsnorm(a.x, m->ffn_norm + (long long)l * dim, a.xb, n, dim, m->eps);
    linear(&m->wgu[l], a.xb, n, &a.qa, a.gu);
    struct rows_job sj = { 1, a.gu, n, m->hidden, 0, a.xb };
    rows_run(&sj);
    linear(&m->wdown[l], a.xb, n, &a.qa, a.tmp);
    for (long long k = 0; k < (long long)n * dim; k++)
      a.x[k] += a.tmp[k];
  }

  // final norm and the LM head, only for the rows whose logits are wanted
  for (int o = 0; o < n_out; o++)
    pyllm_rmsnorm(a.x + (long long)out_rows[o] * dim, m->out_norm,
                  a.xb + (long long)o * dim, 1, dim, m->eps);
  linear(m->head, a.xb, n_out, &a.qa, logits);
  if (greedy)
    pyllm_argmax_rows(logits, n_out, m->vocab, greedy);
  return 0;
}
