// gguf.h: the one loop of GGUF parsing that is too slow in Python.

#ifndef PYLLM_GGUF_H
#define PYLLM_GGUF_H

#include <stdint.h>

// cffi:begin
long long pyllm_gguf_skip_strings(const uint8_t *buf, long long size, long long off,
                                  long long count);
// cffi:end

#endif
