// string.c: the few C library string routines the kernel uses.

#include "types.h"

void*
memset(void *dst, int c, uint n)
{
  uchar *d = dst;
  uint64 word;

  // word stores for the aligned middle: page clearing is hot in exec/fork,
  // and eight per loop turn, because the emulator pays for every turn (a
  // translated block and its lookup) more than for the stores in it
  if(((uint64)d & 7) == 0 && n >= 8){
    word = (uchar)c;
    word |= word << 8;
    word |= word << 16;
    word |= word << 32;
    for(; n >= 64; n -= 64, d += 64){
      uint64 *w = (uint64*)d;
      w[0] = word; w[1] = word; w[2] = word; w[3] = word;
      w[4] = word; w[5] = word; w[6] = word; w[7] = word;
    }
    for(; n >= 8; n -= 8, d += 8)
      *(uint64*)d = word;
  }
  while(n-- > 0)
    *d++ = c;
  return dst;
}

int
memcmp(const void *v1, const void *v2, uint n)
{
  const uchar *s1 = v1, *s2 = v2;

  while(n-- > 0){
    if(*s1 != *s2)
      return *s1 - *s2;
    s1++, s2++;
  }
  return 0;
}

void*
memmove(void *dst, const void *src, uint n)
{
  const uchar *s = src;
  uchar *d = dst;

  if(n == 0)
    return dst;
  if(s < d && s + n > d){
    // overlapping, destination above source: copy backwards
    s += n;
    d += n;
    while(n-- > 0)
      *--d = *--s;
    return dst;
  }
  // word copies when both are aligned (page copies in fork), eight per
  // loop turn (see memset)
  if((((uint64)s | (uint64)d) & 7) == 0){
    for(; n >= 64; n -= 64, s += 64, d += 64){
      const uint64 *ws = (const uint64*)s;
      uint64 *wd = (uint64*)d;
      uint64 w0 = ws[0], w1 = ws[1], w2 = ws[2], w3 = ws[3];
      uint64 w4 = ws[4], w5 = ws[5], w6 = ws[6], w7 = ws[7];
      wd[0] = w0; wd[1] = w1; wd[2] = w2; wd[3] = w3;
      wd[4] = w4; wd[5] = w5; wd[6] = w6; wd[7] = w7;
    }
    for(; n >= 8; n -= 8, s += 8, d += 8)
      *(uint64*)d = *(const uint64*)s;
  }
  while(n-- > 0)
    *d++ = *s++;
  return dst;
}

// gcc may emit calls to memcpy for structure copies
void*
memcpy(void *dst, const void *src, uint n)
{
  return memmove(dst, src, n);
}

int
strncmp(const char *p, const char *q, uint n)
{
  while(n > 0 && *p && *p == *q)
    n--, p++, q++;
  if(n == 0)
    return 0;
  return (uchar)*p - (uchar)*q;
}

// copy at most n bytes, padding with NULs; like strncpy, the result is not
// NUL-terminated when src has n or more bytes
char*
strncpy(char *s, const char *t, int n)
{
  char *os = s;

  for(; n > 0 && *t; n--)
    *s++ = *t++;
  for(; n > 0; n--)
    *s++ = 0;
  return os;
}

// like strncpy but always NUL-terminates (when n > 0)
char*
safestrcpy(char *s, const char *t, int n)
{
  char *os = s;

  if(n <= 0)
    return os;
  while(--n > 0 && (*s++ = *t++) != 0)
    ;
  *s = 0;
  return os;
}

int
strlen(const char *s)
{
  int n;

  for(n = 0; s[n]; n++)
    ;
  return n;
}
