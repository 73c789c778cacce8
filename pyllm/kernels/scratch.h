// scratch.h: per-thread scratch memory kept between calls of a forward pass.

#ifndef PYLLM_SCRATCH_H
#define PYLLM_SCRATCH_H

#include <stddef.h>

// cffi:begin
// Bytes of scratch the calling thread holds now (tests: it is reused, not regrown).
size_t pyllm_scratch_held(void);
// cffi:end

// A 64-byte aligned buffer of at least `bytes` owned by the calling thread,
// contents undefined; valid until its next call on this thread. Grows only;
// freed when the thread exits. NULL if out of memory.
void *pyllm_scratch(size_t bytes);

struct pyllm_qact;
// One forward call's activations in the thread's scratch: `floats` floats
// (returned), then `qa`'s int8 rows and block sums for n rows of up to `wide`
// columns (quant.h), each part 64-byte aligned. NULL if out of memory.
float *pyllm_scratch_acts(long long floats, int n, int wide, struct pyllm_qact *qa);

#endif
