// nfc.c: Unicode NFC normalisation (decompose, order marks, recompose), as
// Qwen3.5's tokenizer applies it before splitting text. Tables from
// Python's unicodedata (scripts/gen_uninorm.py -> build/user/uninorm.h).
// Bytes that are not UTF-8 pass through unchanged.

#include "types.h"
#include "user.h"
#include "nfc.h"
#include "uninorm.h"

#define RAWBYTE 0x80000000u   // a byte that is no UTF-8, kept as it is
#define SBASE 0xAC00
#define LBASE 0x1100
#define VBASE 0x1161
#define TBASE 0x11A7
#define NV 21
#define NT 28
#define NS (19 * NV * NT)

static int
find(const uint32 *a, int n, uint32 key, int shift)
{
  int lo = 0, hi = n - 1;

  while(lo <= hi){
    int mid = (lo + hi) / 2;
    uint32 v = a[mid] >> shift;
    if(v == key)
      return mid;
    if(v < key)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

static int
ccc(uint32 cp)
{
  int i = cp & RAWBYTE ? -1 : find(nf_ccc, NF_NCCC, cp, 8);
  return i < 0 ? 0 : nf_ccc[i] & 0xff;
}

// the primary composite of (a, b), 0 if none
static uint32
compose(uint32 a, uint32 b)
{
  if(a >= LBASE && a < LBASE + 19 && b >= VBASE && b < VBASE + NV)
    return SBASE + ((a - LBASE) * NV + (b - VBASE)) * NT;
  if(a >= SBASE && a < SBASE + NS && (a - SBASE) % NT == 0 && b > TBASE &&
     b < TBASE + NT)
    return a + (b - TBASE);
  int lo = 0, hi = NF_NCOMP - 1;
  while(lo <= hi){
    int mid = (lo + hi) / 2;
    const uint32 *e = nf_comp + 3 * mid;
    if(e[0] == a && e[1] == b)
      return e[2];
    if(e[0] < a || (e[0] == a && e[1] < b))
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return 0;
}

// one code point (or RAWBYTE|byte) from s[0..n); its length in *len
static uint32
utf8(const uchar *s, int n, int *len)
{
  uint32 c = s[0], cp;
  int k;

  *len = 1;
  if(c < 0x80)
    return c;
  if(c >= 0xc2 && c < 0xe0){ k = 2; cp = c & 0x1f; }
  else if(c >= 0xe0 && c < 0xf0){ k = 3; cp = c & 0x0f; }
  else if(c >= 0xf0 && c < 0xf5){ k = 4; cp = c & 0x07; }
  else return RAWBYTE | c;
  if(k > n)
    return RAWBYTE | c;
  for(int i = 1; i < k; i++){
    if((s[i] & 0xc0) != 0x80)
      return RAWBYTE | c;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
     (cp >= 0xd800 && cp < 0xe000))
    return RAWBYTE | c;
  *len = k;
  return cp;
}

static int
put8(uchar *o, uint32 cp)
{
  if(cp & RAWBYTE){ o[0] = cp; return 1; }
  if(cp < 0x80){ o[0] = cp; return 1; }
  if(cp < 0x800){ o[0] = 0xc0 | cp >> 6; o[1] = 0x80 | (cp & 0x3f); return 2; }
  if(cp < 0x10000){
    o[0] = 0xe0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 0x3f);
    o[2] = 0x80 | (cp & 0x3f);
    return 3;
  }
  o[0] = 0xf0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 0x3f);
  o[2] = 0x80 | (cp >> 6 & 0x3f); o[3] = 0x80 | (cp & 0x3f);
  return 4;
}

// NFC of in[0..n) into a new malloc'd buffer *out; returns its length, or
// -1 when out of memory. Text without a byte >= 0xCC (nothing from U+0300
// on) is NFC already and is copied as it is.
int
nfc(const uchar *in, int n, uchar **out)
{
  int need = 0, len;

  for(int i = 0; i < n; i++)
    need |= in[i] >= 0xcc;
  if(!need){
    *out = malloc(n + 1);
    if(*out == 0)
      return -1;
    memmove(*out, in, n);
    return n;
  }
  uint32 *d = malloc(4 * (NF_MAXDEC * n + 1));
  uchar *o = malloc(3 * n + 4);
  if(d == 0 || o == 0){
    free(d);
    free(o);
    return -1;
  }
  int nd = 0;
  for(int i = 0; i < n; i += len){     // decompose
    uint32 cp = utf8(in + i, n - i, &len);
    if(cp >= SBASE && cp < SBASE + NS){
      uint32 s = cp - SBASE;
      d[nd++] = LBASE + s / (NV * NT);
      d[nd++] = VBASE + s % (NV * NT) / NT;
      if(s % NT)
        d[nd++] = TBASE + s % NT;
      continue;
    }
    int k = cp & RAWBYTE ? -1 : find(nf_dec, NF_NDEC, cp, 0);
    if(k < 0){
      d[nd++] = cp;
      continue;
    }
    for(int j = 0; j < (nf_decoff[k] & 7); j++)
      d[nd++] = nf_decseq[(nf_decoff[k] >> 3) + j];
  }
  for(int i = 1; i < nd; i++){           // canonical order (stable)
    int c = ccc(d[i]);
    for(int j = i; c && j > 0 && ccc(d[j - 1]) > c; j--){
      uint32 t = d[j];
      d[j] = d[j - 1];
      d[j - 1] = t;
    }
  }
  int no = 0, starter = -1, lastcc = 0;  // recompose, in place in d
  for(int i = 0; i < nd; i++){
    uint32 c = d[i];
    int cc = ccc(c);
    if(starter >= 0 && (no - 1 == starter || (lastcc != 0 && lastcc < cc))){
      uint32 comp = compose(d[starter], c);
      if(comp){
        d[starter] = comp;
        continue;
      }
    }
    if(cc == 0)
      starter = no;
    lastcc = cc;
    d[no++] = c;
  }
  len = 0;
  for(int i = 0; i < no; i++)
    len += put8(o + len, d[i]);
  free(d);
  *out = o;
  return len;
}
