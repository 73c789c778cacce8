// gdn.c: the Gated DeltaNet kernels of Qwen3.5: the causal conv (+ SiLU),
// the recurrent delta-rule update of decode, and the chunked form of the same
// rule for prefill (at the end of the file). numpy twins: causal_conv,
// delta_rule_step, delta_rule_chunked in pyllm/models/qwen35.py.
//
// The delta rule for one head, with e = exp(g):
//   kv    = e * S^T k            what the memory recalls for key k   (dv)
//   delta = beta * (v - kv)      the correction to write              (dv)
//   S     = e * S + k delta^T                                         (dk, dv)
//   o     = S^T q = e * S^T q + delta * (k . q)
// so one read pass over S gives both S^T k and S^T q, and a second pass
// writes the update: 2 reads + 1 write of S per token (S is 64 KB per head,
// 1 MB per 0.8B layer). Heads are independent and split over the pool.

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gdn.h"
#include "kernels.h"
#include "pool.h"
#include "vmath.h"

// ------------------------------------------------------------- conv

// Input row t - (kc - 1) + j of the window of row t: from the state while
// the index is negative, else from x.
static inline const float *
tap_row(const float *state, const float *x, int t, int j, int c, int kc)
{
  int r = t - (kc - 1) + j;
  return r < 0 ? state + (long long)(r + kc - 1) * c : x + (long long)r * c;
}

static void
conv_generic(const float *state, const float *x, int n, const float *w, int c, int kc,
             float *out)
{
  for (int t = 0; t < n; t++)
    for (int i = 0; i < c; i++) {
      float acc = 0;
      for (int j = 0; j < kc; j++)
        acc += w[(long long)j * c + i] * tap_row(state, x, t, j, c, kc)[i];
      out[(long long)t * c + i] = acc / (1.0f + expf(-acc));
    }
}

// c % 16 == 0
PYLLM_TARGET_AVX512 static void
conv_avx512(const float *state, const float *x, int n, const float *w, int c, int kc,
            float *out)
{
  for (int t = 0; t < n; t++)
    for (int i = 0; i < c; i += 16) {
      __m512 acc = _mm512_setzero_ps();
      for (int j = 0; j < kc; j++)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + (long long)j * c + i),
                              _mm512_loadu_ps(tap_row(state, x, t, j, c, kc) + i), acc);
      __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f),
                                 vexp512(_mm512_sub_ps(_mm512_setzero_ps(), acc)));
      _mm512_storeu_ps(out + (long long)t * c + i, _mm512_div_ps(acc, den));
    }
}

void
pyllm_gdn_conv(float *state, const float *x, int n, const float *w, int c, int kc, float *out)
{
  if (n < 1)
    return;
  if (pyllm_use_avx512() && c % 16 == 0)
    conv_avx512(state, x, n, w, c, kc, out);
  else
    conv_generic(state, x, n, w, c, kc, out);
  // the new state: the last kc - 1 rows of [state | x], oldest first
  int keep = kc - 1 - n;  // old rows that stay (when n < kc - 1)
  if (keep > 0)
    memmove(state, state + (long long)n * c, sizeof(float) * (size_t)keep * c);
  else
    keep = 0;
  int from_x = kc - 1 - keep;
  memcpy(state + (long long)keep * c, x + (long long)(n - from_x) * c,
         sizeof(float) * (size_t)from_x * c);
}

// ------------------------------------------------------------- delta rule

// One head, any sizes. kvq holds 2*dv floats of scratch.
static void
head_generic(float *S, const float *q, const float *k, const float *v, float g, float beta,
             int dk, int dv, float *out, float *kvq)
{
  float e = expf(g);
  float *kv = kvq, *qv = kvq + dv;
  float kq = 0;
  for (int c = 0; c < dv; c++)
    kv[c] = qv[c] = 0;
  for (int r = 0; r < dk; r++) {  // pass 1: S^T k and S^T q
    kq += k[r] * q[r];
    for (int c = 0; c < dv; c++) {
      kv[c] += S[r * dv + c] * k[r];
      qv[c] += S[r * dv + c] * q[r];
    }
  }
  for (int c = 0; c < dv; c++) {
    float delta = beta * (v[c] - e * kv[c]);
    out[c] = e * qv[c] + delta * kq;
    kv[c] = delta;
  }
  for (int r = 0; r < dk; r++)  // pass 2: S = e S + k delta^T
    for (int c = 0; c < dv; c++)
      S[r * dv + c] = e * S[r * dv + c] + k[r] * kv[c];
}

// One head with dv == 128: the 128 columns live in 8 registers per vector.
PYLLM_TARGET_AVX512 static void
head_avx512_128(float *S, const float *q, const float *k, const float *v, float g, float b,
                int dk, float *out)
{
  __m512 e = _mm512_set1_ps(expf(g)), beta = _mm512_set1_ps(b);
  __m512 kv[8], qv[8];
  for (int c = 0; c < 8; c++)
    kv[c] = qv[c] = _mm512_setzero_ps();
  float kq = 0;
  for (int r = 0; r < dk; r++) {
    __m512 kr = _mm512_set1_ps(k[r]), qr = _mm512_set1_ps(q[r]);
    kq += k[r] * q[r];
    const float *row = S + r * 128;
    for (int c = 0; c < 8; c++) {
      __m512 s = _mm512_loadu_ps(row + 16 * c);
      kv[c] = _mm512_fmadd_ps(s, kr, kv[c]);
      qv[c] = _mm512_fmadd_ps(s, qr, qv[c]);
    }
  }
  __m512 vkq = _mm512_set1_ps(kq);
  for (int c = 0; c < 8; c++) {
    __m512 delta = _mm512_mul_ps(beta, _mm512_fnmadd_ps(e, kv[c], _mm512_loadu_ps(v + 16 * c)));
    _mm512_storeu_ps(out + 16 * c, _mm512_fmadd_ps(delta, vkq, _mm512_mul_ps(e, qv[c])));
    kv[c] = delta;
  }
  for (int r = 0; r < dk; r++) {
    __m512 kr = _mm512_set1_ps(k[r]);
    float *row = S + r * 128;
    for (int c = 0; c < 8; c++)
      _mm512_storeu_ps(row + 16 * c,
                       _mm512_fmadd_ps(kr, kv[c], _mm512_mul_ps(e, _mm512_loadu_ps(row + 16 * c))));
  }
}

// One head of the delta rule (see the top of the file); dv <= 1024.
void
gdn_head(float *S, const float *q, const float *k, const float *v, float g, float beta,
         int dk, int dv, float *out)
{
  // Subnormal floats in S (a long-decayed memory) would make every FMA take a
  // microcode assist; flush them to zero while this head runs.
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
  if (dv == 128 && pyllm_use_avx512())
    head_avx512_128(S, q, k, v, g, beta, dk, out);
  else {
    float scratch[2 * 1024];
    head_generic(S, q, k, v, g, beta, dk, dv, out, scratch);
  }
  _mm_setcsr(csr);
}

struct step_job {
  float *S;
  const float *q, *k, *v, *g, *beta;
  int dk, dv;
  float *out;
};

static void
step_head(void *arg, int h)
{
  const struct step_job *j = arg;
  gdn_head(j->S + (size_t)h * j->dk * j->dv, j->q + h * j->dk, j->k + h * j->dk,
           j->v + h * j->dv, j->g[h], j->beta[h], j->dk, j->dv, j->out + h * j->dv);
}

// Returns 0, or -1 if dv exceeds the generic path's scratch (Qwen3.5: 128).
int
pyllm_gdn_step(float *S, const float *q, const float *k, const float *v, const float *g,
               const float *beta, int heads, int dk, int dv, float *out)
{
  if (dv < 1 || dv > 1024 || dk < 1 || heads < 1)
    return -1;
  struct step_job j = { S, q, k, v, g, beta, dk, dv, out };
  pool_run(step_head, &j, heads);
  return 0;
}

// ------------------------------------------------------------- chunked prefill
//
// The same rule over a whole prompt, chunk by chunk (length n <= 64), with
// G = cumsum(g) inside the chunk and D[i][j] = exp(G_i - G_j) for j <= i:
//   A[i][j] = beta_i (k_i . k_j) D[i][j] (j < i)   U = (I + A)^-1 beta v
//   W = (I + A)^-1 (beta e^G k)                    (both by forward substitution)
//   Vn = U - W S;  o = (e^G q) S + (QK * D) Vn     (QK lower triangular)
//   S = e^G_last S + (e^(G_last - G) k)^T Vn
// The numpy twin is delta_rule_chunked() in pyllm/models/qwen35.py. The
// products go through mm_acc(): C += a A B with A read through two strides,
// so transposed operands need no copy.

#define MAXCHUNK 64

// C[m][c] += alpha * sum_k A[m*ars + k*acs] * B[k*ldb + c] for m < M, c < N.
static void
mm_generic(float *C, int ldc, const float *A, long ars, long acs, const float *B, int ldb,
           int M, int K, int N, float alpha)
{
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      float a = alpha * A[m * ars + k * acs];
      const float *b = B + (long)k * ldb;
      float *c = C + (long)m * ldc;
      for (int x = 0; x < N; x++)
        c[x] += a * b[x];
    }
}

// Same, N % 128 == 0: tiles of 2 rows x 128 columns held in 16 registers
// (constant trip counts, so the accumulators never leave the registers).
PYLLM_TARGET_AVX512 static void
mm_avx512(float *C, int ldc, const float *A, long ars, long acs, const float *B, int ldb,
          int M, int K, int N, float alpha)
{
  for (int c0 = 0; c0 < N; c0 += 128)
    for (int m = 0; m < M; m += 2) {
      int two = m + 1 < M;
      float *c_0 = C + (long)m * ldc + c0, *c_1 = two ? c_0 + ldc : c_0;
      const float *a_0 = A + m * ars, *a_1 = two ? a_0 + ars : a_0;
      __m512 acc0[8], acc1[8];
      for (int v = 0; v < 8; v++) {
        acc0[v] = _mm512_loadu_ps(c_0 + 16 * v);
        acc1[v] = _mm512_loadu_ps(c_1 + 16 * v);
      }
      for (int k = 0; k < K; k++) {
        const float *b = B + (long)k * ldb + c0;
        __m512 x0 = _mm512_set1_ps(alpha * a_0[k * acs]);
        __m512 x1 = _mm512_set1_ps(alpha * a_1[k * acs]);
        for (int v = 0; v < 8; v++) {
          __m512 bv = _mm512_loadu_ps(b + 16 * v);
          acc0[v] = _mm512_fmadd_ps(x0, bv, acc0[v]);
          acc1[v] = _mm512_fmadd_ps(x1, bv, acc1[v]);
        }
      }
      // a lone last row was computed twice into the same place: store row 1 first
      for (int v = 0; v < 8; v++)
        _mm512_storeu_ps(c_1 + 16 * v, acc1[v]);
      for (int v = 0; v < 8; v++)
        _mm512_storeu_ps(c_0 + 16 * v, acc0[v]);
    }
}

static void
mm_acc(float *C, int ldc, const float *A, long ars, long acs, const float *B, int ldb, int M,
       int K, int N, float alpha)
{
  if (pyllm_use_avx512() && N % 128 == 0)
    mm_avx512(C, ldc, A, ars, acs, B, ldb, M, K, N, alpha);
  else
    mm_generic(C, ldc, A, ars, acs, B, ldb, M, K, N, alpha);
}

static float
cdot_generic(const float *a, const float *b, int n)
{
  float s = 0;
  for (int i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

PYLLM_TARGET_AVX512 static float
cdot_avx512(const float *a, const float *b, int n)  // n % 16 == 0
{
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  return _mm512_reduce_add_ps(acc);
}

// Dot products of rows (QK, A): the AVX-512 one when the width allows.
typedef float (*dot_fn)(const float *, const float *, int);

static dot_fn
pick_dot(int n)
{
  return pyllm_use_avx512() && n % 16 == 0 ? cdot_avx512 : cdot_generic;
}

static inline float
cdecay(float x)  // exp of a log-decay, flushed to 0 below e^-60 like decay()
{
  return x > -60.0f ? expf(x) : 0.0f;
}

struct chunk_job {
  float *S;
  const float *q, *k, *v, *g, *beta;  // (T, heads, d) and (T, heads)
  int heads, T, dk, dv, chunk;
  float *out;                         // (T, heads, dv)
  int failed;
};

// Scratch floats of one head: A, QK (n x n), U, Vn (n x dv), W, qG, kt (n x dk), G, tail.
static size_t
chunk_scratch(int dk, int dv)
{
  return 2 * MAXCHUNK * MAXCHUNK + (size_t)MAXCHUNK * (2 * dv + 3 * dk) + 2 * MAXCHUNK;
}

// One head, every chunk in order (the state carries over).
static void
chunked_head(const struct chunk_job *j, int h, float *sc)
{
  int H = j->heads, dk = j->dk, dv = j->dv;
  long rs = (long)H * dk;  // stride between tokens of one head's q/k rows
  float *S = j->S + (long)h * dk * dv;
  float *A = sc, *QK = A + MAXCHUNK * MAXCHUNK, *U = QK + MAXCHUNK * MAXCHUNK;
  float *Vn = U + MAXCHUNK * dv, *W = Vn + MAXCHUNK * dv, *qG = W + MAXCHUNK * dk;
  float *kt = qG + MAXCHUNK * dk, *G = kt + MAXCHUNK * dk, *tail = G + MAXCHUNK;
  dot_fn cdot = pick_dot(dk);
  for (int t0 = 0; t0 < j->T; t0 += j->chunk) {
    int n = j->T - t0 < j->chunk ? j->T - t0 : j->chunk;
    const float *q = j->q + ((long)t0 * H + h) * dk, *k = j->k + ((long)t0 * H + h) * dk;
    const float *v = j->v + ((long)t0 * H + h) * dv;
    const float *g = j->g + (long)t0 * H + h, *beta = j->beta + (long)t0 * H + h;
    float *out = j->out + ((long)t0 * H + h) * dv, acc = 0;
    for (int i = 0; i < n; i++)
      G[i] = acc += g[(long)i * H];
    for (int i = 0; i < n; i++)
      tail[i] = cdecay(G[n - 1] - G[i]);
    // A (strictly lower, beta folded in), QK (lower, decay folded in)
    for (int i = 0; i < n; i++)
      for (int c = 0; c < n; c++) {
        float D = c <= i ? cdecay(G[i] - G[c]) : 0.0f;  // QK is used whole: zero above
        QK[i * MAXCHUNK + c] = D != 0.0f ? cdot(q + i * rs, k + c * rs, dk) * D : 0.0f;
        A[i * MAXCHUNK + c] = c < i && D != 0.0f
                                  ? beta[(long)i * H] * cdot(k + i * rs, k + c * rs, dk) * D
                                  : 0.0f;
      }
    // U = (I + A)^-1 beta v and W = (I + A)^-1 beta e^G k, row by row
    for (int i = 0; i < n; i++) {
      float b = beta[(long)i * H], eg = cdecay(G[i]);
      for (int d = 0; d < dv; d++)
        U[i * dv + d] = b * v[(long)i * H * dv + d];
      for (int d = 0; d < dk; d++) {
        W[i * dk + d] = b * eg * k[i * rs + d];
        qG[i * dk + d] = eg * q[i * rs + d];
        kt[i * dk + d] = tail[i] * k[i * rs + d];
      }
      mm_acc(U + i * dv, dv, A + i * MAXCHUNK, 0, 1, U, dv, 1, i, dv, -1.0f);
      mm_acc(W + i * dk, dk, A + i * MAXCHUNK, 0, 1, W, dk, 1, i, dk, -1.0f);
    }
    // Vn = U - W S; o = qG S + QK Vn (QK is zero above the diagonal)
    memcpy(Vn, U, sizeof(float) * n * dv);
    mm_acc(Vn, dv, W, dk, 1, S, dv, n, dk, dv, -1.0f);
    float o[MAXCHUNK * 256];  // dv <= 256 here
    memset(o, 0, sizeof(float) * n * dv);
    mm_acc(o, dv, qG, dk, 1, S, dv, n, dk, dv, 1.0f);
    mm_acc(o, dv, QK, MAXCHUNK, 1, Vn, dv, n, n, dv, 1.0f);
    for (int i = 0; i < n; i++)
      memcpy(out + (long)i * H * dv, o + i * dv, sizeof(float) * dv);
    // S = e^G_last S + kt^T Vn
    float last = cdecay(G[n - 1]);
    for (long x = 0; x < (long)dk * dv; x++)
      S[x] *= last;
    mm_acc(S, dv, kt, 1, dk, Vn, dv, dk, n, dv, 1.0f);
  }
}

// Per-thread scratch, kept between calls: a fresh malloc of this size is an
// mmap, whose page faults and unmapping cost more than the arithmetic.
static __thread float *tls_scratch;
static __thread size_t tls_floats;

static void
chunk_head(void *arg, int h)
{
  struct chunk_job *j = arg;
  size_t need = chunk_scratch(j->dk, j->dv);
  if (tls_floats < need) {
    free(tls_scratch);
    tls_scratch = malloc(sizeof(float) * need);
    tls_floats = tls_scratch ? need : 0;
  }
  if (!tls_scratch) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // FTZ | DAZ, as in gdn_head
  chunked_head(j, h, tls_scratch);
  _mm_setcsr(csr);
}

int
pyllm_gdn_chunked(float *S, const float *q, const float *k, const float *v, const float *g,
                  const float *beta, int heads, int T, int dk, int dv, int chunk, float *out)
{
  if (heads < 1 || T < 1 || dk < 1 || dv < 1 || dv > 256 || chunk < 1 || chunk > MAXCHUNK)
    return -1;
  struct chunk_job j = { S, q, k, v, g, beta, heads, T, dk, dv, chunk, out, 0 };
  pool_run(chunk_head, &j, heads);
  return j.failed ? -2 : 0;
}
