// gguf.c: skip over a GGUF array of strings (u64 length + bytes each), which
// for a 49k-token vocabulary and 49k merges is 98k steps: a loop that is slow
// in Python and cheap in C. pyllm/loaders/gguf.py falls back to Python without
// it.

#include <string.h>

#include "gguf.h"

// Offset just past `count` strings starting at `off`, or -1 if they run past
// `size` bytes (a truncated or malformed file).
long long
pyllm_gguf_skip_strings(const uint8_t *buf, long long size, long long off, long long count)
{
  for (long long i = 0; i < count; i++) {
    uint64_t n;
    if (off < 0 || off + 8 > size)
      return -1;
    memcpy(&n, buf + off, 8);
    if (n > (uint64_t)(size - off - 8))
      return -1;
    off += 8 + (long long)n;
  }
  return off;
}
