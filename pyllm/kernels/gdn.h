// gdn.h: Gated DeltaNet kernels (Qwen3.5 linear-attention layers).
//
// The numpy twins are causal_conv(), delta_rule_step() and
// delta_rule_chunked() in pyllm/models/qwen35.py; tests/test_qwen_kernels.py
// compares them.

#ifndef PYLLM_GDN_H
#define PYLLM_GDN_H

// cffi:begin
// n tokens through the causal depthwise conv + SiLU.
//   state: (kc-1, c) pre-conv rows of the previous tokens, oldest first;
//          replaced by the last kc-1 rows of [state | x].
//   x: (n, c) the tokens' pre-conv rows; w: (kc, c) taps, w[kc-1] for the
//   current token. out: (n, c), row t = silu(sum_j w[j] * window_t[j]).
void pyllm_gdn_conv(float *state, const float *x, int n, const float *w, int c, int kc,
                    float *out);

// One token of the gated delta rule for every value head, in place on S.
//   S: (heads, dk, dv) state; q, k: (heads, dk) (q already scaled);
//   v: (heads, dv); g: (heads) log-decay; beta: (heads) write strength.
//   out: (heads, dv) = S_new^T q, where S_new = e^g S + k (beta (v - e^g S^T k))^T.
//   Returns 0, or -1 for sizes out of range (dv > 1024).
int pyllm_gdn_step(float *S, const float *q, const float *k, const float *v,
                   const float *g, const float *beta, int heads, int dk, int dv,
                   float *out);

// T tokens of the same rule in the chunked form (prefill), in place on S.
//   q, k: (T, heads, dk) (q already scaled); v: (T, heads, dv);
//   g, beta: (T, heads); out: (T, heads, dv); chunk: tokens per chunk, <= 64;
//   dv <= 256. Returns 0, -1 for sizes out of range, -2 if out of memory.
int pyllm_gdn_chunked(float *S, const float *q, const float *k, const float *v,
                      const float *g, const float *beta, int heads, int T, int dk,
                      int dv, int chunk, float *out);
// cffi:end

// One head of pyllm_gdn_step (S: dk x dv, q, k: dk, v, out: dv), for other
// kernels (qwen35.c) that schedule heads themselves.
void gdn_head(float *S, const float *q, const float *k, const float *v, float g, float beta,
              int dk, int dv, float *out);

#endif
