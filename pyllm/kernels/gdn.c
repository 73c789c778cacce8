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

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// ------------------------------------------------------------- conv step

static inline float
silu1(float x)
{
  return x / (1.0f + expf(-x));
}

static void
conv_generic(float *state, const float *x, const float *w, int c, int kc, float *out)
{
  for (int i = 0; i < c; i++) {
    float acc = w[(kc - 1) * c + i] * x[i];
    for (int j = 0; j < kc - 1; j++)
      acc += w[j * c + i] * state[j * c + i];
    out[i] = silu1(acc);
  }
}

#if defined(__x86_64__)
// exp(x) for 16 floats: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
// polynomial (rel. error < 2e-7), times 2^n via scalef. Inputs are clamped
// to [-88, 88] (silu only needs the sign of overflow right).
PYLLM_TARGET_AVX512 static inline __m512
exp16(__m512 x)
{
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(88.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

PYLLM_TARGET_AVX512 static void
conv_avx512(float *state, const float *x, const float *w, int c, int kc, float *out)
{
  int i = 0;
  for (; i + 16 <= c; i += 16) {
    __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(w + (kc - 1) * c + i), _mm512_loadu_ps(x + i));
    for (int j = 0; j < kc - 1; j++)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + j * c + i),
                            _mm512_loadu_ps(state + j * c + i), acc);
    __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f),
                               exp16(_mm512_sub_ps(_mm512_setzero_ps(), acc)));
    _mm512_storeu_ps(out + i, _mm512_div_ps(acc, den));
  }
  if (i < c)
    conv_generic(state, x, w, c, kc, out);  // tail: recomputes all, cheap and rare
}
#endif

void
pyllm_gdn_conv_step(float *state, const float *x, const float *w, int c, int kc, float *out)
{
#if defined(__x86_64__)
  if (pyllm_use_avx512() && c % 16 == 0)
    conv_avx512(state, x, w, c, kc, out);
  else
#endif
    conv_generic(state, x, w, c, kc, out);
  // shift the window: drop the oldest row, append x
  if (kc > 2)
    memmove(state, state + c, sizeof(float) * (size_t)(kc - 2) * c);
  if (kc > 1)
    memcpy(state + (size_t)(kc - 2) * c, x, sizeof(float) * c);
}

// ------------------------------------------------------------- delta rule

struct step_job {
  float *S;
  const float *q, *k, *v, *g, *beta;
  int dk, dv;
  float *out;
};

// One head, any sizes. kvq holds 2*dv floats of scratch.
static void
head_generic(const struct step_job *j, int h, float *kvq)
{
  int dk = j->dk, dv = j->dv;
  float *S = j->S + (size_t)h * dk * dv;
  const float *q = j->q + h * dk, *k = j->k + h * dk, *v = j->v + h * dv;
  float e = expf(j->g[h]), beta = j->beta[h];
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
    j->out[h * dv + c] = e * qv[c] + delta * kq;
    kv[c] = delta;
  }
  for (int r = 0; r < dk; r++)  // pass 2: S = e S + k delta^T
    for (int c = 0; c < dv; c++)
      S[r * dv + c] = e * S[r * dv + c] + k[r] * kv[c];
}

#if defined(__x86_64__)
// One head with dv == 128: the 128 columns live in 8 registers per vector.
PYLLM_TARGET_AVX512 static void
head_avx512_128(const struct step_job *j, int h)
{
  int dk = j->dk;
  float *S = j->S + (size_t)h * dk * 128;
  const float *q = j->q + h * dk, *k = j->k + h * dk, *v = j->v + h * 128;
  __m512 e = _mm512_set1_ps(expf(j->g[h])), beta = _mm512_set1_ps(j->beta[h]);
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
    _mm512_storeu_ps(j->out + h * 128 + 16 * c,
                     _mm512_fmadd_ps(delta, vkq, _mm512_mul_ps(e, qv[c])));
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
#endif

static void
step_head(void *arg, int h)
{
  const struct step_job *j = arg;
#if defined(__x86_64__)
  if (j->dv == 128 && pyllm_use_avx512()) {
    head_avx512_128(j, h);
    return;
  }
#endif
  float scratch[2 * 1024];  // dv <= 1024, checked by pyllm_gdn_step
  head_generic(j, h, scratch);
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
