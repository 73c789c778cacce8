// kquant.h: llama.cpp's Q4_K and Q6_K weights, repacked without changing a
// bit of their values into 16-row records the VNNI products read (kquant.c).
//
// Both are 256-column super-blocks; a record holds one super-block of 16
// rows, so a row group is one contiguous stream as in quant.h. Columns go
// in 32-column units u (0..7); like a Q4X16 record, chunk c (0..3) of a
// unit has byte 4r+t = (nibble of column 32u+4c+t) | (nibble of column
// 32u+16+4c+t) << 4 for row r, so one 64-byte load feeds 16 rows.
//
//   Q4K16 record (2304 bytes = 36 lines, the 16 rows' bytes as stored),
//   w = d*sc[j]*q - dmin*m[j]:
//     8 units x 256 bytes of nibbles (unit u = sub-block u)
//     u8 s[12][16]                   byte k of row r's 12 packed bytes of 6-bit
//                                    scales and mins at 16k+r (unpacked for 16
//                                    rows at once, kquant.c)
//     f16 d[16], f16 dmin[16]
//   Q6K16 record (3360 bytes, the 16 rows' bytes as stored), w = d*sc[k]*(q - 32):
//     8 units x 384 bytes: 4 nibble chunks (the low 4 bits, as above), then
//       2 chunks of the high 2 bits: chunk h byte 4r+t, bits 2k..2k+1 =
//       high bits of column 32u + 16h + 4k + t
//     i8 sc[16][16]                  sub-block k = columns 16k..16k+15
//     f16 d[16]
//   3360 bytes are 52.5 lines, so the records go in pairs as Q8X16's do
//   (quant.h): the 3072 bytes of units of super-blocks 2p and 2p+1, then
//   their scales (6720 bytes = 105 lines); an odd last super-block is
//   followed by its scales and 32 zero bytes.
//
// The products take int8 activations quantized per 256 columns (quant.h,
// pyllm_quantize_act_for), with the sums of each 16 and 32 columns.

#ifndef PYLLM_KQUANT_H
#define PYLLM_KQUANT_H

#include <stdint.h>

#include "quant.h"

// cffi:begin
#define PYLLM_Q4K16 6
#define PYLLM_Q6K16 7
#define PYLLM_Q4K16_RECORD 2304
#define PYLLM_Q6K16_RECORD 3360
#define PYLLM_Q6K16_QS 3072      // its units' bytes

int pyllm_repack_q4_k(const uint8_t *src, int rows, int cols, uint8_t *dst);
int pyllm_repack_q6_k(const uint8_t *src, int rows, int cols, uint8_t *dst);
// cffi:end

// Bytes of a 16-row group of `cols` columns (a multiple of 256), or -1.
long long kq_group_bytes(int type, int cols);

// Where super-block s of a Q6K16 group of nsb has its units, and its scales
// (in pairs, as quant.h's pair_body_at / pair_scales_at say).
static inline long long
q6k16_qs_at(int s)
{
  return pair_body_at(PYLLM_Q6K16_QS, PYLLM_Q6K16_RECORD - PYLLM_Q6K16_QS, s);
}

static inline long long
q6k16_scales_at(int nsb, int s)
{
  return pair_scales_at(PYLLM_Q6K16_QS, PYLLM_Q6K16_RECORD - PYLLM_Q6K16_QS, nsb, s);
}

// One row group g of a K record matrix times all tokens of x (activations of
// group 256): out[t][16g+r], row stride ostride.
void kq_group(const struct pyllm_qmat *w, const struct pyllm_qact *x, int g, float *out,
              int ostride, int avx);

#endif
