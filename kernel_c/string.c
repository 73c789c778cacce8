// string.c: the few C library string routines the kernel uses.

#include "types.h"

void*
memset(void *dst, int c, uint n)
{
  uchar *d = dst;
  uint64 word;

  // word stores for the aligned middle: page clearing is hot in exec/fork
  if(((uint64)d & 7) == 0 && n >= 8){
    word = (uchar)c;
    word |= word << 8;
    word |= word << 16;
    word |= word << 32;
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
  // word copies when both are aligned (page copies in fork)
  if((((uint64)s | (uint64)d) & 7) == 0){
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
