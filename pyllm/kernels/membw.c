// membw.c: memory-bandwidth probe. The decode kernels are bound by how fast
// the weights stream in from DRAM, so the benchmark measures that rate in the
// same process, with the same threads and a similar access pattern (each
// chunk a sequential 64-byte-load stream), and quotes TPOT against it.

#include "kernels.h"
#include "membw.h"
#include "pool.h"

#include <immintrin.h>

#define CHUNK (256 * 1024)

struct read_job {
  const uint8_t *p;
  long long n;
  long long sum;  // xor of the chunks' checksums (atomic: chunks run on any thread)
};

static long long
read_generic(const uint8_t *p, long long n)
{
  const uint64_t *w = (const uint64_t *)p;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (long long i = 0; i + 4 <= n / 8; i += 4) {
    a ^= w[i];
    b ^= w[i + 1];
    c ^= w[i + 2];
    d ^= w[i + 3];
  }
  return (long long)(a ^ b ^ c ^ d);
}

PYLLM_TARGET_AVX512 static long long
read_avx512(const uint8_t *p, long long n)
{
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (long long i = 0; i + 256 <= n; i += 256) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
  return _mm512_reduce_add_epi64(a);
}

static void
read_chunk(void *arg, int i)
{
  struct read_job *j = arg;
  long long off = (long long)i * CHUNK;
  long long len = j->n - off < CHUNK ? j->n - off : CHUNK;
  long long s;
  if (pyllm_use_avx512())
    s = read_avx512(j->p + off, len);
  else
    s = read_generic(j->p + off, len);
  __atomic_fetch_xor(&j->sum, s, __ATOMIC_RELAXED);
}

long long
pyllm_stream_read(const uint8_t *p, long long n)
{
  struct read_job j = { p, n, 0 };
  pool_run(read_chunk, &j, (int)((n + CHUNK - 1) / CHUNK));
  return j.sum;
}
