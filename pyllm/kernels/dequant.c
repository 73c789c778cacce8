// dequant.c: GGUF blocks -> float32 (dequant.h). Each function follows the
// numpy dequantizer of its type (pyllm/quants.py, kquants.py) operation for
// operation: the per-sub-block factor first (d * scale, in float32), then
// factor * q, then the min subtracted or added. The generic functions are
// compiled for the baseline target, which has no FMA; the AVX-512 ones (for
// Q5_1 and Q5_K, the types a Q5_K_M file requantizes) are compiled with
// fp-contract off, so there too no product is fused with a sum.

#include <immintrin.h>
#include <string.h>

#include "dequant.h"
#include "kernels.h"

#define QK_K 256

static const int8_t KVALUES[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113 };

static inline float
f16(const uint8_t *p)
{
  _Float16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

// Weight i (0..31) of a 32-weight block's 16 nibble bytes: low nibbles first.
static inline int
nib(const uint8_t *qs, int i)
{
  return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

static void
dq_q4_0(const uint8_t *b, float *y)
{
  float d = f16(b);
  for (int i = 0; i < 32; i++)
    y[i] = d * (float)(nib(b + 2, i) - 8);
}

static void
dq_q4_1(const uint8_t *b, float *y)
{
  float d = f16(b), m = f16(b + 2);
  for (int i = 0; i < 32; i++)
    y[i] = d * (float)nib(b + 4, i) + m;
}

// The 32 bits of a little-endian u32 as 32 bytes of 0 or 16 (a fifth bit in
// place), 8 bits a step: the byte replicated 8 times, bit k kept in byte k,
// a nonzero byte's top bit set by adding 0x7F (no carry out of a byte), moved
// to bit 4. The per-weight work is then byte and float loops the compiler
// turns into vector code.
static inline void
fifth_bytes(const uint8_t *qh4, uint8_t *out)
{
  for (int k = 0; k < 4; k++) {
    uint64_t t = (qh4[k] * 0x0101010101010101ull) & 0x8040201008040201ull;
    t = ((t + 0x7F7F7F7F7F7F7F7Full) & 0x8080808080808080ull) >> 3;
    memcpy(out + 8 * k, &t, 8);
  }
}

// The 5-bit values of a Q5_0/Q5_1 block: fifth bits from the u32 at qh4,
// nibbles from the 16 bytes at qs (low nibbles first).
static inline void
q5_values(const uint8_t *qh4, const uint8_t *qs, uint8_t *q)
{
  fifth_bytes(qh4, q);
  for (int i = 0; i < 16; i++) {
    q[i] |= qs[i] & 15;
    q[16 + i] |= qs[i] >> 4;
  }
}

static void
dq_q5_0(const uint8_t *b, float *y)
{
  float d = f16(b);
  uint8_t q[32];
  q5_values(b + 2, b + 6, q);
  for (int i = 0; i < 32; i++)
    y[i] = d * (float)((int)q[i] - 16);
}

static void
dq_q5_1(const uint8_t *b, float *y)
{
  float d = f16(b), m = f16(b + 2);
  uint8_t q[32];
  q5_values(b + 4, b + 8, q);
  for (int i = 0; i < 32; i++)
    y[i] = d * (float)q[i] + m;
}

static void
dq_q8_0(const uint8_t *b, float *y)
{
  float d = f16(b);
  for (int i = 0; i < 32; i++)
    y[i] = (float)(int8_t)b[2 + i] * d;
}

static void
dq_iq4_nl(const uint8_t *b, float *y)
{
  float d = f16(b);
  for (int i = 0; i < 32; i++)
    y[i] = d * (float)KVALUES[nib(b + 2, i)];
}

// The 2-bit value of weight p of Q2_K/Q3_K's 64 bytes of crumbs.
static inline int
crumb(const uint8_t *qs, int p)
{
  return qs[32 * (p / 128) + p % 32] >> (2 * (p / 32 % 4)) & 3;
}

static void
dq_q2_k(const uint8_t *b, float *y)
{
  float d = f16(b + 80), dmin = f16(b + 82);
  for (int k = 0; k < 16; k++) {
    float dl = d * (float)(b[k] & 15), ml = dmin * (float)(b[k] >> 4);
    for (int i = 16 * k; i < 16 * k + 16; i++)
      y[i] = dl * (float)crumb(b + 16, i) - ml;
  }
}

static void
dq_q3_k(const uint8_t *b, float *y)
{
  float d = f16(b + 108);
  const uint8_t *s = b + 96;
  for (int k = 0; k < 16; k++) {
    int lo = k < 8 ? s[k] & 15 : s[k - 8] >> 4, hi = s[8 + k % 4] >> (2 * (k / 4)) & 3;
    float dl = d * (float)((lo | hi << 4) - 32);
    for (int i = 16 * k; i < 16 * k + 16; i++) {
      int set = b[i % 32] >> (i / 32) & 1;  // a set bit of hmask: no offset
      y[i] = dl * (float)(crumb(b + 32, i) - (set ? 0 : 4));
    }
  }
}

// Q4_K/Q5_K's 6-bit scale and min of sub-block j from the 12 packed bytes.
static void
scale_min_k4(const uint8_t *s, int j, int *sc, int *m)
{
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

// Q4_K (q5 = 0) and Q5_K (q5 = 1: 32 bytes of fifth bits before the nibbles).
// Sub-block j: the nibbles of bytes 32 (j / 2).. (low for even j), bit j of
// the 32 fifth-bit bytes.
static void
dq_q45_k(const uint8_t *b, float *y, int q5)
{
  float d = f16(b), dmin = f16(b + 2);
  const uint8_t *qh = b + 16, *qs = b + 16 + 32 * q5;
  for (int j = 0; j < 8; j++) {
    int sc, m;
    scale_min_k4(b + 4, j, &sc, &m);
    float dl = d * (float)sc, ml = dmin * (float)m;
    const uint8_t *src = qs + 32 * (j / 2);
    int shift = 4 * (j % 2);
    uint8_t q[32];
    for (int i = 0; i < 32; i++)
      q[i] = (uint8_t)((src[i] >> shift) & 15);
    if (q5)
      for (int i = 0; i < 32; i++)
        q[i] |= (uint8_t)(((qh[i] >> j) & 1) << 4);
    for (int i = 0; i < 32; i++)
      y[32 * j + i] = dl * (float)q[i] - ml;
  }
}

static void
dq_q6_k(const uint8_t *b, float *y)
{
  float d = f16(b + 208);
  for (int k = 0; k < 16; k++) {
    float dl = d * (float)(int8_t)b[192 + k];
    for (int i = 16 * k; i < 16 * k + 16; i++) {
      int h = i / 128, r = i % 128;
      uint8_t l = b[64 * h + r % 64];
      int lo = r < 64 ? l & 15 : l >> 4;
      int hi = b[128 + 32 * h + r % 32] >> (2 * (r / 32)) & 3;
      y[i] = dl * (float)((lo | hi << 4) - 32);
    }
  }
}

static void
dq_iq4_xs(const uint8_t *b, float *y)
{
  float d = f16(b);
  int sh = b[2] | b[3] << 8;
  for (int j = 0; j < 8; j++) {
    int lo = b[4 + j / 2] >> (4 * (j % 2)) & 15, hi = sh >> (2 * j) & 3;
    float dl = d * (float)((lo | hi << 4) - 32);
    for (int i = 0; i < 32; i++)
      y[32 * j + i] = dl * (float)KVALUES[nib(b + 8 + 16 * j, i)];
  }
}

// ------------------------------------------------------------ AVX-512

#define DEQUANT_AVX512 PYLLM_TARGET_AVX512 __attribute__((optimize("fp-contract=off")))

// 32 values 0..31 (bytes) -> y[0..31] = a * (float)q + b, or a * q - b (minus).
static inline __attribute__((always_inline)) DEQUANT_AVX512 void
affine32(__m256i q, float a, float b, int minus, float *y)
{
  __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
  __m512 lo = _mm512_mul_ps(av, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q))));
  __m512 hi = _mm512_mul_ps(av, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1))));
  _mm512_storeu_ps(y, minus ? _mm512_sub_ps(lo, bv) : _mm512_add_ps(lo, bv));
  _mm512_storeu_ps(y + 16, minus ? _mm512_sub_ps(hi, bv) : _mm512_add_ps(hi, bv));
}

// 16 bytes of nibbles -> 32 bytes: the low nibbles, then the high ones.
static inline __attribute__((always_inline)) DEQUANT_AVX512 __m256i
nibbles32(const uint8_t *qs)
{
  __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

static DEQUANT_AVX512 void
dq_q5_1_avx512(const uint8_t *src, long long nblocks, float *dst)
{
  for (long long i = 0; i < nblocks; i++) {
    const uint8_t *b = src + i * 24;
    uint32_t qh;
    memcpy(&qh, b + 4, 4);  // bit i: the fifth bit of weight i
    __m256i q = _mm256_mask_add_epi8(nibbles32(b + 8), (__mmask32)qh, nibbles32(b + 8),
                                     _mm256_set1_epi8(16));
    affine32(q, f16(b), f16(b + 2), 0, dst + i * 32);
  }
}

static DEQUANT_AVX512 void
dq_q5_k_avx512(const uint8_t *src, long long nblocks, float *dst)
{
  const __m256i m15 = _mm256_set1_epi8(15), sixteen = _mm256_set1_epi8(16);
  for (long long i = 0; i < nblocks; i++) {
    const uint8_t *b = src + i * 176;
    float d = f16(b), dmin = f16(b + 2);
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
    for (int j = 0; j < 8; j++) {
      int sc, m;
      scale_min_k4(b + 4, j, &sc, &m);
      __m256i v = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * (j / 2)));
      __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, m15);
      __mmask32 fifth = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << j)));
      q = _mm256_mask_add_epi8(q, fifth, q, sixteen);
      affine32(q, d * (float)sc, dmin * (float)m, 1, dst + i * QK_K + 32 * j);
    }
  }
}

// One type's block: its dequantizer (0: dq_q45_k), weights and bytes.
struct block_kind {
  void (*fn)(const uint8_t *, float *);
  int weights, bytes;
};

static int
block_kind(int ggml_type, struct block_kind *k)
{
  static const struct {
    int type;
    struct block_kind k;
  } kinds[] = {
    { 2, { dq_q4_0, 32, 18 } },     { 3, { dq_q4_1, 32, 20 } },   { 6, { dq_q5_0, 32, 22 } },
    { 7, { dq_q5_1, 32, 24 } },     { 8, { dq_q8_0, 32, 34 } },   { 10, { dq_q2_k, QK_K, 84 } },
    { 11, { dq_q3_k, QK_K, 110 } }, { 12, { 0, QK_K, 144 } },     { 13, { 0, QK_K, 176 } },
    { 14, { dq_q6_k, QK_K, 210 } }, { 20, { dq_iq4_nl, 32, 18 } }, { 23, { dq_iq4_xs, QK_K, 136 } },
  };
  for (unsigned i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (kinds[i].type == ggml_type) {
      *k = kinds[i].k;
      return 0;
    }
  return -1;
}

int
pyllm_dequant_block(int ggml_type, int *weights, int *bytes)
{
  struct block_kind k;
  if (block_kind(ggml_type, &k) < 0)
    return -1;
  *weights = k.weights;
  *bytes = k.bytes;
  return 0;
}

int
pyllm_dequant(int ggml_type, const uint8_t *src, long long nblocks, float *dst)
{
  struct block_kind k;
  if (block_kind(ggml_type, &k) < 0)
    return -1;
  if (pyllm_use_avx512() && (ggml_type == 7 || ggml_type == 13)) {
    (ggml_type == 7 ? dq_q5_1_avx512 : dq_q5_k_avx512)(src, nblocks, dst);
    return 0;
  }
  for (long long i = 0; i < nblocks; i++) {
    const uint8_t *b = src + i * k.bytes;
    float *y = dst + i * k.weights;
    if (k.fn)
      k.fn(b, y);
    else
      dq_q45_k(b, y, ggml_type == 13);
  }
  return 0;
}
