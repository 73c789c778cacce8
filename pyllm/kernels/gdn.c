// gdn.c: the decode hot path of a Gated DeltaNet layer (Qwen3.5): the
// causal conv step and the recurrent delta-rule update. Prefill does not come
// here: it uses the chunked matrix form in numpy (pyllm/models/qwen35.py).
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
