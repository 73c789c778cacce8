// ops.h: the small per-token operations of a transformer layer.

#ifndef PYLLM_OPS_H
#define PYLLM_OPS_H

#include <stdint.h>

// cffi:begin
// The KV cache is paged by blocks of KV_BLOCK positions, the block outermost:
//   k [blocks][layers][kv heads][head_dim][KV_BLOCK]   (keys transposed, so
//                                                      the scores of 16
//                                                      positions are one op)
//   v [blocks][layers][kv heads][KV_BLOCK][head_dim]
// A new position touches only its own block, so a large fresh cache is not
// faulted in (or huge-page-zeroed) all at once. Kernels take the address of
// block 0 of one (layer, kv head 0) and the distance between blocks.
#define PYLLM_KV_BLOCK 64
void pyllm_rmsnorm(const float *x, const float *w, float *out, int n, int dim, float eps);
void pyllm_rope(float *x, int n, int stride, int n_heads, int head_dim, const int32_t *pos,
                float theta);
void pyllm_attention(const float *q, int qstride, const float *k, const float *v,
                     long long block_stride, const int32_t *pos, int n, int n_heads,
                     int n_kv_heads, int head_dim, float *out, int ostride);
void pyllm_silu_mul(const float *gu, int n, int hidden, float *out);
void pyllm_embed_q8_0(const uint8_t *table, int dim, const int32_t *tokens, int n, float *out);
// out[i] = the index of the largest of x[i][0..cols), the lowest on ties
// (NaNs never win unless x[i][0] is one: the order of `>` comparisons)
void pyllm_argmax_rows(const float *x, int n, int cols, int32_t *out);
// cffi:end

// Attention of the query heads sharing one KV head, for one row at position
// pos: k and v point at that head's block 0 in the paged cache above, blocks
// block_stride floats apart. q and out point at the group's first head.
void attend_group(const float *q, const float *k, const float *v, long long block_stride,
                  int pos, int group, int head_dim, float *out);

// RoPE in two steps: angle tables [n][head_dim/2] once per batch, then any
// number of applications (q heads, k heads, every layer).
void rope_tables(const int32_t *pos, int n, int head_dim, float theta, float *c, float *s);
void rope_apply(float *x, int n, int stride, int n_heads, int head_dim, const float *c,
                const float *s);

// Rows [i0, i1) of SiLU(gate) * up.
void silu_mul_rows(const float *gu, int i0, int i1, int hidden, float *out);

#endif
