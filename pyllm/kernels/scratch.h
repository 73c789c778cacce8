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

// A size rounded up to 64 bytes, and the scratch bytes of five such parts laid
// one after another (each part starts 64-byte aligned).
static inline size_t
round64(size_t b)
{
  return (b + 63) / 64 * 64;
}

static inline size_t
scratch_bytes(const size_t part[5])
{
  size_t t = 0;
  for (int i = 0; i < 5; i++)
    t += round64(part[i]);
  return t;
}

#endif
