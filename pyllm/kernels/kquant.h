// kquant.h: llama.cpp's Q4_K and Q6_K weights, repacked without changing a
// bit of their values into 16-row records the VNNI products read (kquant.c).
//
// Both are 256-column super-blocks; a record holds one super-block of 16
// rows, so a row group is one contiguous stream as in quant.h. Columns go
// in 32-column units u (0..7); like a Q4X16 record, chunk c (0..3) of a
// unit has byte 4r+t = (nibble of column 32u+4c+t) | (nibble of column
// 32u+16+4c+t) << 4 for row r, so one 64-byte load feeds 16 rows.
//
//   Q4K16 record (2368 bytes = 37 lines), w = d*sc[j]*q - dmin*m[j]:
//     8 units x 256 bytes of nibbles (unit u = sub-block u)
//     u8 sc[8][16], u8 m[8][16]      the 6-bit scales and mins, unpacked
//     f16 d[16], f16 dmin[16]
//   Q6K16 record (3392 bytes = 53 lines), w = d*sc[k]*(q - 32):
//     8 units x 384 bytes: 4 nibble chunks (the low 4 bits, as above), then
//       2 chunks of the high 2 bits: chunk h byte 4r+t, bits 2k..2k+1 =
//       high bits of column 32u + 16h + 4k + t
//     i8 sc[16][16]                  sub-block k = columns 16k..16k+15
//     f16 d[16], 32 zero bytes (so the next record starts on a line)
//
// The products take int8 activations per 32 columns (quant.h); Q6_K's
// 16-column sub-blocks need the sums of each block's first 16 activations
// too, which pyllm_qmatmul computes for the call (struct kq_sums).

#ifndef PYLLM_KQUANT_H
#define PYLLM_KQUANT_H

#include <stdint.h>

#include "quant.h"

// cffi:begin
#define PYLLM_Q4K16 6
#define PYLLM_Q6K16 7
#define PYLLM_Q4K16_RECORD 2368
#define PYLLM_Q6K16_RECORD 3392

int pyllm_repack_q4_k(const uint8_t *src, int rows, int cols, uint8_t *dst);
int pyllm_repack_q6_k(const uint8_t *src, int rows, int cols, uint8_t *dst);
// cffi:end

// Bytes of a 16-row group of `cols` columns (a multiple of 256), or -1.
long long kq_group_bytes(int type, int cols);

// The activation sums of the first 16 columns of every 32-column block
// ([n][cols/32]), in buf if it holds cap of them, else in a malloc'd array
// (NULL if that fails). Only Q6K16 needs them.
int32_t *kq_half_sums(const struct pyllm_qact *x, int32_t *buf, long long cap);

// One row group g of a K record matrix times all tokens of x: out[t][16g+r],
// row stride ostride.
void kq_group(const struct pyllm_qmat *w, const struct pyllm_qact *x, const int32_t *half,
              int g, float *out, int ostride, int avx);

#endif
