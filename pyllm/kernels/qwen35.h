// qwen35.h: one batched forward pass of Qwen3.5 (hybrid Gated DeltaNet +
// gated attention) on the fast path: decode rows and prompt chunks of several
// sequences in one pass over the weights.

#ifndef PYLLM_QWEN35_H
#define PYLLM_QWEN35_H

#include <stdint.h>

#include "quant.h"

// cffi:begin
struct pyllm_qwen35 {
  int dim;                            // D, residual width (1024)
  int hidden;                         // F, SwiGLU width (3584)
  int n_layers;
  int vocab;
  float eps;                          // RMSNorm epsilon
  const int32_t *kind;                // [n_layers]: 0 = DeltaNet, 1 = attention
  const int32_t *slot;                // [n_layers]: index among layers of its kind
  // full attention
  int n_heads, n_kv_heads, head_dim;  // 8, 2, 256
  int rot_dim;                        // leading dims of each head RoPE rotates (64)
  const float *inv_freq;              // [rot_dim / 2] RoPE frequencies
  const float *q_norm, *k_norm;       // [n_attn][head_dim], already 1 + w
  // Gated DeltaNet
  int lk_heads, lv_heads, lk_dim, lv_dim, conv_k;   // 16, 16, 128, 128, 4
  int v_tiled;                        // value head h uses q/k head h % lk_heads (GGUF's
                                      // order), else h / (lv_heads / lk_heads) (HF's)
  const float *conv_w;                // [n_lin][conv_k][conv_dim]
  const float *neg_a;                 // [n_lin][lv_heads] = -exp(A_log)
  const float *dt_bias;               // [n_lin][lv_heads]
  const float *gnorm;                 // [n_lin][lv_dim] gated-norm weight (plain)
  // every layer
  const uint16_t *embd_bf16;          // [vocab][dim] token embedding as bf16 bits, or NULL
  const float *embd_f32;              // [vocab][dim] float32 embedding, or NULL
  const float *norm1, *norm2;         // [n_layers][dim] input / post-attention, 1 + w
  const float *out_norm;              // [dim] final norm, 1 + w
  const struct pyllm_qmat *mix_in;    // [n_layers] DeltaNet qkv|z|b|a or attention q|k|v
  const struct pyllm_qmat *mix_out;   // [n_layers] out_proj / o_proj
  const struct pyllm_qmat *wgu;       // [n_layers] gate | up
  const struct pyllm_qmat *wdown;     // [n_layers]
  const struct pyllm_qmat *head;      // LM head [vocab (padded to 16)][dim]
};

// One sequence's caches (numpy arrays owned by Python).
struct pyllm_qwen35_seq {
  float *conv;                        // [n_lin][conv_k - 1][conv_dim], oldest row first
  float *ssm;                         // [n_lin][lv_heads][lk_dim][lv_dim]
  float *k, *v;                       // [n_attn][n_kv_heads][cap][head_dim]
  int cap;                            // positions allocated in k, v
  // nsnap > 0: after the row (never the call's last of this sequence) whose
  // position + 1 is snap_end[k], copy the DeltaNet state into snap_conv[k],
  // snap_ssm[k] (shaped as conv, ssm): the prefix cache's snapshots inside a
  // prompt chunk (block boundaries, prompt_n - 1)
  int nsnap;
  const int32_t *snap_end;
  float **snap_conv, **snap_ssm;
};

// Run n rows through the model: row i is token tokens[i] of sequence
// seqs[seq[i]] at position pos[i]; the rows of a sequence are consecutive and
// in position order (a prompt chunk, or one decode token), sequences numbered
// 0..nseq-1 in row order. Writes the logits of rows out_rows[0..n_out) to
// logits[n_out][head->rows]. Returns 0, -1 if out of memory, -2 on a bad
// argument (rows out of order, a position outside the cache, a bad id).
int pyllm_qwen35_forward(const struct pyllm_qwen35 *m, int n, const int32_t *tokens,
                         const int32_t *pos, const int32_t *seq, int nseq,
                         const struct pyllm_qwen35_seq *seqs, int n_out,
                         const int32_t *out_rows, float *logits);

// Cumulative time of the forward passes: out[6] = seconds in int8 matmuls,
// DeltaNet, attention, other, total, and the call count; reset = 1 zeroes them.
void pyllm_qwen35_profile(double *out, int reset);
// cffi:end

#endif
