// ulib.c: the program entry point and the small C library every user
// program links with (strings, memory, number parsing, stat, gets).
//
// Plain byte loops on purpose: programs are tiny and the code is read by
// students; the hot paths that need speed (llmrun) bring their own.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "user.h"

int main(int argc, char *argv[]);

// The ELF entry point (user.ld). The kernel's exec passes argc in a0 and
// argv in a1; returning from main is the same as calling exit. Its own
// section puts it first in .text, at address 0, where no other function
// may be: a function there has a null address (init's service table
// takes function addresses).
__attribute__((section(".text._start"))) void
_start(int argc, char *argv[])
{
  exit(main(argc, argv));
}

char *
strcpy(char *dst, const char *src)
{
  char *d = dst;

  while((*d++ = *src++) != 0)
    ;
  return dst;
}

// Copies at most n bytes; like C's strncpy, pads with NULs and does not
// terminate a source of n bytes or more.
char *
strncpy(char *dst, const char *src, int n)
{
  int i = 0;

  for(; i < n && src[i]; i++)
    dst[i] = src[i];
  for(; i < n; i++)
    dst[i] = 0;
  return dst;
}

char *
strcat(char *dst, const char *src)
{
  strcpy(dst + strlen(dst), src);
  return dst;
}

int
strcmp(const char *a, const char *b)
{
  while(*a && *a == *b)
    a++, b++;
  return (uchar)*a - (uchar)*b;
}

int
strncmp(const char *a, const char *b, uint n)
{
  for(; n > 0; n--, a++, b++){
    if(*a != *b || *a == 0)
      return (uchar)*a - (uchar)*b;
  }
  return 0;
}

uint
strlen(const char *s)
{
  uint n = 0;

  while(s[n])
    n++;
  return n;
}

char *
strchr(const char *s, char c)
{
  for(; *s; s++)
    if(*s == c)
      return (char *)s;
  return c == 0 ? (char *)s : 0;
}

char *
strrchr(const char *s, char c)
{
  const char *last = 0;

  for(; *s; s++)
    if(*s == c)
      last = s;
  return c == 0 ? (char *)s : (char *)last;
}

char *
strstr(const char *hay, const char *needle)
{
  uint n = strlen(needle);

  for(; *hay; hay++)
    if(strncmp(hay, needle, n) == 0)
      return (char *)hay;
  return n == 0 ? (char *)hay : 0;
}

void *
memset(void *dst, int c, uint n)
{
  uchar *d = dst;

  while(n-- > 0)
    *d++ = c;
  return dst;
}

// Handles overlapping regions (copies backwards when dst is above src).
void *
memmove(void *dst, const void *src, int n)
{
  uchar *d = dst;
  const uchar *s = src;

  if(s < d && s + n > d){
    d += n;
    s += n;
    while(n-- > 0)
      *--d = *--s;
  } else {
    while(n-- > 0)
      *d++ = *s++;
  }
  return dst;
}

// The compiler may emit calls to memcpy for struct copies even with
// -fno-builtin, so it must exist.
void *
memcpy(void *dst, const void *src, uint n)
{
  return memmove(dst, src, n);
}

int
memcmp(const void *a, const void *b, uint n)
{
  const uchar *p = a, *q = b;

  for(; n > 0; n--, p++, q++)
    if(*p != *q)
      return *p - *q;
  return 0;
}

// Reads one line (including its '\n') into buf, at most max-1 bytes, one
// read() per byte so that nothing past the line is consumed. Returns buf;
// buf[0] == 0 at end of input.
char *
gets(char *buf, int max)
{
  int i = 0;
  char c;

  while(i + 1 < max){
    if(read(0, &c, 1) < 1)
      break;
    buf[i++] = c;
    if(c == '\n' || c == '\r')
      break;
  }
  buf[i] = 0;
  return buf;
}

int
stat(const char *path, struct stat *st)
{
  int fd, r;

  fd = open(path, O_RDONLY);
  if(fd < 0)
    return -1;
  r = fstat(fd, st);
  close(fd);
  return r;
}

int
isspace(int c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

int
isdigit(int c)
{
  return c >= '0' && c <= '9';
}

static int
digitval(int c)
{
  if(c >= '0' && c <= '9')
    return c - '0';
  if(c >= 'a' && c <= 'z')
    return c - 'a' + 10;
  if(c >= 'A' && c <= 'Z')
    return c - 'A' + 10;
  return 99;
}

// Like C's strtol: leading spaces, an optional sign, and for base 0 a
// "0x" (hex) or "0" (octal) prefix. *end (if end != 0) points past the
// last digit used, or at s when there were none. No overflow detection.
long
strtol(const char *s, char **end, int base)
{
  const char *p = s;
  long v = 0;
  int neg = 0, any = 0;

  while(isspace(*p))
    p++;
  if(*p == '-' || *p == '+')
    neg = *p++ == '-';
  if((base == 0 || base == 16) && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')
     && digitval(p[2]) < 16){
    p += 2;
    base = 16;
  } else if(base == 0){
    base = p[0] == '0' ? 8 : 10;
  }
  for(; digitval(*p) < base; p++, any = 1)
    v = v * base + digitval(*p);
  if(end)
    *end = (char *)(any ? p : s);
  return neg ? -v : v;
}

int
atoi(const char *s)
{
  return strtol(s, 0, 10);
}
