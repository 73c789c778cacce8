// llama.h: one batched forward pass of a Llama-architecture model on the
// fast path (repacked int4/int8 weights, int8 activations, f32 KV cache).

#ifndef PYLLM_LLAMA_H
#define PYLLM_LLAMA_H

#include <stdint.h>

#include "quant.h"

// cffi:begin
struct pyllm_llama {
  int dim;                            // model width (576)
  int hidden;                         // SwiGLU width (1536)
  int n_layers;
  int n_heads;                        // query heads
  int n_kv_heads;                     // key/value heads (GQA)
  int head_dim;
  int vocab;
  float eps;                          // RMSNorm epsilon
  float theta;                        // RoPE base
  const uint8_t *embd_q8_0;           // GGUF Q8_0 token embedding [vocab][dim], or NULL
  const float *embd_f32;              // f32 token embedding [vocab][dim], or NULL
  const float *attn_norm;             // [n_layers][dim]
  const float *ffn_norm;              // [n_layers][dim]
  const float *out_norm;              // [dim]
  const struct pyllm_qmat *wqkv;      // [n_layers]: rows = q (dim) | k | v (kv_dim each)
  const struct pyllm_qmat *wo;        // [n_layers]: dim x dim
  const struct pyllm_qmat *wgu;       // [n_layers]: rows = gate (hidden) | up (hidden)
  const struct pyllm_qmat *wdown;     // [n_layers]: dim x hidden
  const struct pyllm_qmat *head;      // vocab x dim (tied to the embedding or not)
};

// One sequence's KV cache, paged by blocks of positions (layout in ops.h);
// cap is a multiple of PYLLM_KV_BLOCK.
struct pyllm_seq {
  float *k;
  float *v;
  int cap;
};

int pyllm_llama_forward(const struct pyllm_llama *m, int n, const int32_t *tokens,
                        const int32_t *pos, const int32_t *seq, const struct pyllm_seq *seqs,
                        int n_out, const int32_t *out_rows, float *logits, int32_t *greedy);
// cffi:end

#endif
