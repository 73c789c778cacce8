// rowq8.h: the OS course's int8 weight matrices ("qmat": one float32 scale
// per row, weight[r][c] = scale[r] * q[r][c]) on the fast path.
//
// The course stores a matrix as `rows` float32 scales, then rows x cols int8,
// row-major (pyllm/loaders/course_assets.py). At load time it is repacked into
// 16-row records like Q8X16 (quant.h), so one 64-byte load feeds one VNNI dot
// product for 16 output rows at once:
//
//   Q8R16 matrix (rows % 16 == 0, cols % 32 == 0), row group after row group,
//   each group one contiguous stream of
//     float scale[16]                   64 bytes
//     cols/32 records of 512 bytes:     8 x 64 bytes, chunk j, byte 4r+t =
//                                       q[16g + r][32b + 4j + t] + 128
//
// pyllm_qmatmul() (matmul.c) hands a struct pyllm_qmat of type PYLLM_Q8R16 to
// pyllm_q8r16_matmul(), so the Llama and Qwen3.5 C forward passes run these
// weights unchanged. Activations are quant.h's int8 blocks; per block b
//   acc[r] += (isum - 128 * sum(xq)) * dx[b],   and at the end out = acc * scale.
//
// pyllm_rowq8_matmul_f32() is the course's own arithmetic (float32
// activations) on the unpacked layout: the exact alternative, measured
// against the int8 one in docs/ARCHITECTURE.md ("Course assets").

#ifndef PYLLM_ROWQ8_H
#define PYLLM_ROWQ8_H

#include <stdint.h>

#include "quant.h"

// cffi:begin
#define PYLLM_Q8R16 3
#define PYLLM_Q8R16_RECORD 512
#define PYLLM_Q8R16_GROUP_HEAD 64

long long pyllm_q8r16_bytes(int rows, int cols);
int pyllm_repack_rowq8(const float *scale, const int8_t *q, int rows, int cols, int rows_out,
                       uint8_t *dst);
void pyllm_rowq8_dequantize(const float *scale, const int8_t *q, int rows, int cols, float *out);
void pyllm_q8r16_matmul(const struct pyllm_qmat *w, const struct pyllm_qact *x, float *out);
void pyllm_rowq8_matmul_f32(const float *scale, const int8_t *q, int rows, int cols,
                            const float *x, int n, float *out);
// cffi:end

#endif
