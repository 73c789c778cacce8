// dequant.h: GGUF block types -> float32 in C, value for value what
// pyllm/quants.py and kquants.py compute in numpy (the same float32 operations
// in the same order, so the results are bit-identical: tests/test_quants.py).
//
// Used where a type has no record kind of its own and is requantized at load
// (Q5_1, Q2_K, Q3_K, Q5_K, IQ4_XS: pyllm/backend/records.py); in numpy the
// dequantization was most of a first load of such a file.

#ifndef PYLLM_DEQUANT_H
#define PYLLM_DEQUANT_H

#include <stdint.h>

// cffi:begin
// `nblocks` blocks of GGUF type `ggml_type` (its number in the GGUF tensor
// table) at src -> their weights at dst. Returns -1 for a type it does not know.
int pyllm_dequant(int ggml_type, const uint8_t *src, long long nblocks, float *dst);
// The weights and bytes of one block of `ggml_type`; -1 for a type it does not know
// (checked against pyllm/quants.py's table by tests/test_quants.py).
int pyllm_dequant_block(int ggml_type, int *weights, int *bytes);
// cffi:end

#endif
