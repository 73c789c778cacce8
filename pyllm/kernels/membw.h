// membw.h: a memory-bandwidth probe for the "weights streamed once per token"
// bound that benchmarks print next to TPOT.

#ifndef PYLLM_MEMBW_H
#define PYLLM_MEMBW_H

#include <stdint.h>

// cffi:begin
// Read n bytes at p (64-byte aligned, n a multiple of 64) once, split over
// the thread pool in 256 KB chunks like the matmul kernels; returns a
// checksum so the reads cannot be optimised away.
long long pyllm_stream_read(const uint8_t *p, long long n);
// cffi:end

#endif
