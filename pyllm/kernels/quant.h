// quant.h: weight formats of the fast path and the int8 activations.
//
// Weights are repacked at load time from GGUF blocks into 16-row
// interleaved records, so one 64-byte load feeds one VNNI dot product for
// 16 output rows at once (lane r = row r):
//
//   Q4X16 record (16 rows x 32 columns, 320 bytes):
//     4 x 64 bytes: chunk j, byte 4r+t = GGUF Q4_1 qs[4j+t] of row r
//                   (low nibble = column 4j+t, high nibble = column 16+4j+t)
//     f16 d[16], f16 m[16]          weight = q * d[r] + m[r]
//   Q5X16 record (16 rows x 32 columns, 352 bytes, GGUF Q5_0's bytes):
//     4 x 64 bytes: chunk j as Q4X16's, from Q5_0 qs[4j+t]
//     64 bytes: byte 4r+t, bit j = fifth bit of column 4j+t, bit 4+j = fifth
//               bit of column 16+4j+t (j = 0..3) of row r
//     f16 d[16]                     weight = (q - 16) * d[r], q = nibble | bit << 4
//   Q8X16 record (16 rows x 32 columns, 512 + 32 bytes):
//     8 x 64 bytes: chunk j, byte 4r+t = Q8_0 qs[4j+t] of row r, plus 128
//     f16 d[16]                     weight = (byte - 128) * d[r]
//
// Records are stored row group by row group, each group's records in column
// order, so a row group is one contiguous stream. Q5X16 records go in pairs
// (two 320-byte bodies, then their scales: 704 bytes = 11 lines; an odd last
// one is followed by its scales and 32 zero bytes). Q8X16 records go in pairs,
// so that every 512-byte block stays 64-byte aligned without 32 bytes of
// padding per record (6 % of the bytes streamed): blocks 2p and 2p+1, then
// their scales (1088 bytes); an odd last block is followed by its scales and
// 32 zero bytes (576).
//
// Activations are quantized per 32-column block like GGUF Q8_0: xq = rint(x/dx),
// dx = max|x|/127, with the block sums sx = sum(xq) kept for the offset terms.
// The inputs of K-quant matrices (kquant.h) are quantized per 256 columns
// instead, like llama.cpp's Q8_K: one dx per super-block lets the K products
// sum a super-block's sub-blocks before any per-token float work. Such
// activations still carry d/ds/s per 32 columns (dx repeated), so every other
// record kind reads them unchanged: a fused matrix of mixed kinds, or
// matrices sharing one input, take the coarser form if any of them needs it.

#ifndef PYLLM_QUANT_H
#define PYLLM_QUANT_H

#include <stdint.h>

// cffi:begin
#define PYLLM_Q4X16 1
#define PYLLM_Q8X16 2
#define PYLLM_Q5X16 9
#define PYLLM_Q4X16_RECORD 320
#define PYLLM_Q5X16_RECORD 352
#define PYLLM_Q8X16_QS 512     // int8 bytes of a Q8X16 record
#define PYLLM_Q8X16_SCALES 32  // its f16 scales (stored after the pair's blocks)
#define PYLLM_PARTS 8          // rows of several matrices of their own types (below)

// A weight matrix of the fast path: rows x cols, both multiples of 16 / 32.
// PYLLM_PARTS: the rows of nparts matrices one after the other, each in its
// own record type (a fused projection whose tensors a GGUF file stores in
// different types, as Q4_K_M does); data is unused.
struct pyllm_qmat {
  const uint8_t *data;  // records, 64-byte aligned
  int rows;
  int cols;
  int type;             // PYLLM_Q4X16, PYLLM_Q8X16, PYLLM_Q4K16, ... (kquant.h)
  const struct pyllm_qmat *parts;
  int nparts;
};

// int8 activations of n rows (tokens) x cols.
struct pyllm_qact {
  int8_t *q;            // [n][cols]
  float *d;             // [n][cols/32]  block scale dx
  float *ds;            // [n][cols/32]  dx * sum(q) of the block
  int32_t *s;           // [n][cols/32]  sum(q) of the block
  int16_t *s16;         // [n][cols/16]  sum(q) of each 16 columns (group 256 only)
  int16_t *b16;         // [n][cols/32]  sum(q) of the block as int16 (group 256 only)
  int n;
  int cols;
  int group;            // columns per scale dx: 32, or 256 (the K-quant products' form)
};

long long pyllm_qmat_bytes(int type, int rows, int cols);
int pyllm_repack_q4_1(const uint8_t *src, int rows, int cols, uint8_t *dst);
int pyllm_repack_q8_0(const uint8_t *src, int rows, int cols, uint8_t *dst);
int pyllm_repack_q5_0(const uint8_t *src, int rows, int cols, uint8_t *dst);
int pyllm_quantize_f32_q8x16(const float *src, int rows, int cols, uint8_t *dst);
int pyllm_requant_q8x16(int ggml_type, const uint8_t *src, int rows, int cols, uint8_t *dst);
void pyllm_quantize_act(const float *x, int n, int cols, struct pyllm_qact *out);
// The columns per scale the products of w need: 256 if w (or a part of it) is a
// K-quant matrix, else 32.
int pyllm_act_group(const struct pyllm_qmat *w);
// x[n][w->cols] -> activations of the form w's products need (out's s16/b16
// arrays are needed for group 256).
void pyllm_quantize_act_for(const struct pyllm_qmat *w, const float *x, int n,
                            struct pyllm_qact *out);
void pyllm_qmatmul(const struct pyllm_qmat *w, const struct pyllm_qact *x, float *out);
// cffi:end

// Bytes of one 16-row Q8X16 group of cols columns.
long long pyllm_q8x16_group_bytes(int cols);

// Records kept in pairs (Q8X16, Q5X16, Q6K16 in kquant.h): two blocks' bodies
// of `body` bytes, then their two scale rows of `sc` bytes; an odd last block
// has its scales right after its body. Where block b of n has each.
static inline long long
pair_body_at(int body, int sc, int b)
{
  return (long long)2 * (body + sc) * (b >> 1) + (long long)body * (b & 1);
}

static inline long long
pair_scales_at(int body, int sc, int n, int b)
{
  long long pair = (long long)2 * (body + sc) * (b >> 1);
  if ((n & 1) && b == n - 1)
    return pair + body;
  return pair + 2 * body + (long long)sc * (b & 1);
}

// Where block b of a Q8X16 group of nb blocks has its int8 chunks, and its scales.
static inline long long
q8x16_qs_at(int b)
{
  return pair_body_at(PYLLM_Q8X16_QS, PYLLM_Q8X16_SCALES, b);
}

static inline long long
q8x16_scales_at(int nb, int b)
{
  return pair_scales_at(PYLLM_Q8X16_QS, PYLLM_Q8X16_SCALES, nb, b);
}

// Where block b of a Q5X16 group of nb blocks has its body (nibbles, fifth
// bits), and its scales.
#define PYLLM_Q5X16_BODY 320
static inline long long
q5x16_body_at(int b)
{
  return pair_body_at(PYLLM_Q5X16_BODY, PYLLM_Q5X16_RECORD - PYLLM_Q5X16_BODY, b);
}

static inline long long
q5x16_scales_at(int nb, int b)
{
  return pair_scales_at(PYLLM_Q5X16_BODY, PYLLM_Q5X16_RECORD - PYLLM_Q5X16_BODY, nb, b);
}

// Rows [i0, i1) of x in out->group columns per scale (out->n and out->cols
// are not touched).
void quantize_rows(const float *x, int i0, int i1, int cols, struct pyllm_qact *out);

#endif
