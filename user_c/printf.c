// printf.c: formatted output for user programs.
//
// One formatter (fmtout) writes into a "sink": either a file descriptor,
// through a 256-byte buffer flushed with write() when full and at the end
// (a system call costs tens of microseconds under the emulator, and one
// write per line keeps concurrent programs' lines whole), or a string
// (snprintf).
//
// Conversions: %d %i %u %x %X %p %s %c %%; length l, ll (both 64-bit) and
// z; flags '-' (left-justify) and '0' (zero-pad); a field width and a
// precision ('.N', max characters for %s, min digits for numbers), each
// either digits or '*'. Enough for the tables llmrun and aibench print.

#include "types.h"
#include "user.h"

struct sink {
  int fd;           // >= 0: write to this fd; -1: string sink
  char *buf;        // string sink: destination
  int cap;          // string sink: bytes available in buf, incl. the NUL
  char tmp[256];    // fd sink: pending bytes
  int ntmp;
  int total;        // characters produced so far (snprintf's result)
};

static void
flush(struct sink *k)
{
  if(k->fd >= 0 && k->ntmp > 0)
    write(k->fd, k->tmp, k->ntmp);
  k->ntmp = 0;
}

static void
put(struct sink *k, char c)
{
  if(k->fd >= 0){
    if(k->ntmp == sizeof(k->tmp))
      flush(k);
    k->tmp[k->ntmp++] = c;
  } else if(k->total + 1 < k->cap){
    k->buf[k->total] = c;
  }
  k->total++;
}

static void
putpad(struct sink *k, char c, int n)
{
  while(n-- > 0)
    put(k, c);
}

// One formatted field: [sign][prefix][zeros]digits, padded to width.
struct field {
  int width;        // minimum characters, 0 = none
  int prec;         // minimum digits / max string chars, -1 = none
  int left;         // '-' flag
  int zero;         // '0' flag
};

static void
putnum(struct sink *k, uint64 x, int base, int neg, int upper,
       const char *prefix, struct field *f)
{
  const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  char buf[24];
  int n = 0, len, zeros = 0, plen = strlen(prefix);

  do {
    buf[n++] = digits[x % base];
    x /= base;
  } while(x != 0);
  if(f->prec > n)
    zeros = f->prec - n;
  len = n + zeros + neg + plen;
  if(f->zero && !f->left && f->prec < 0 && f->width > len){
    zeros += f->width - len;
    len = f->width;
  }
  if(!f->left)
    putpad(k, ' ', f->width - len);
  if(neg)
    put(k, '-');
  while(*prefix)
    put(k, *prefix++);
  putpad(k, '0', zeros);
  while(n > 0)
    put(k, buf[--n]);
  if(f->left)
    putpad(k, ' ', f->width - len);
}

static void
putstr(struct sink *k, const char *s, struct field *f)
{
  int n = 0;

  if(s == 0)
    s = "(null)";
  while(s[n] && (f->prec < 0 || n < f->prec))
    n++;
  if(!f->left)
    putpad(k, ' ', f->width - n);
  for(int i = 0; i < n; i++)
    put(k, s[i]);
  if(f->left)
    putpad(k, ' ', f->width - n);
}

// Reads a width or precision: digits or '*' (taken from the arguments).
static int
fmtint(const char **fmt, va_list *ap)
{
  int v = 0;

  if(**fmt == '*'){
    (*fmt)++;
    return va_arg(*ap, int);
  }
  while(**fmt >= '0' && **fmt <= '9')
    v = v * 10 + *(*fmt)++ - '0';
  return v;
}

static void
fmtout(struct sink *k, const char *fmt, va_list ap)
{
  struct field f;
  int lng;

  for(; *fmt; fmt++){
    if(*fmt != '%'){
      put(k, *fmt);
      continue;
    }
    fmt++;
    f.left = f.zero = 0;
    for(;; fmt++){
      if(*fmt == '-')
        f.left = 1;
      else if(*fmt == '0')
        f.zero = 1;
      else
        break;
    }
    f.width = fmtint(&fmt, &ap);
    if(f.width < 0){
      f.left = 1;
      f.width = -f.width;
    }
    f.prec = -1;
    if(*fmt == '.'){
      fmt++;
      f.prec = fmtint(&fmt, &ap);
    }
    lng = 0;
    while(*fmt == 'l' || *fmt == 'z'){
      lng = 1;
      fmt++;
    }
    switch(*fmt){
    case 'd':
    case 'i': {
      long v = lng ? va_arg(ap, long) : va_arg(ap, int);
      putnum(k, v < 0 ? -(uint64)v : (uint64)v, 10, v < 0, 0, "", &f);
      break;
    }
    case 'u':
      putnum(k, lng ? va_arg(ap, uint64) : va_arg(ap, uint), 10, 0, 0, "", &f);
      break;
    case 'x':
    case 'X':
      putnum(k, lng ? va_arg(ap, uint64) : va_arg(ap, uint), 16, 0,
             *fmt == 'X', "", &f);
      break;
    case 'p':
      putnum(k, (uint64)va_arg(ap, void *), 16, 0, 0, "0x", &f);
      break;
    case 's':
      putstr(k, va_arg(ap, char *), &f);
      break;
    case 'c':
      f.prec = -1;
      if(!f.left)
        putpad(k, ' ', f.width - 1);
      put(k, va_arg(ap, int));
      if(f.left)
        putpad(k, ' ', f.width - 1);
      break;
    case '%':
      put(k, '%');
      break;
    case 0:
      // a lone '%' at the end of the format
      put(k, '%');
      return;
    default:
      // unknown conversion: print it as written so the mistake is visible
      put(k, '%');
      put(k, *fmt);
      break;
    }
  }
}

int
vfprintf(int fd, const char *fmt, va_list ap)
{
  struct sink k;

  k.fd = fd;
  k.ntmp = k.total = 0;
  fmtout(&k, fmt, ap);
  flush(&k);
  return k.total;
}

int
fprintf(int fd, const char *fmt, ...)
{
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vfprintf(fd, fmt, ap);
  va_end(ap);
  return n;
}

int
printf(const char *fmt, ...)
{
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vfprintf(1, fmt, ap);
  va_end(ap);
  return n;
}

// Like C's vsnprintf: writes at most size-1 characters and a NUL (when
// size > 0) and returns the length the full output would have had.
int
vsnprintf(char *buf, int size, const char *fmt, va_list ap)
{
  struct sink k;

  k.fd = -1;
  k.buf = buf;
  k.cap = size;
  k.ntmp = k.total = 0;
  fmtout(&k, fmt, ap);
  if(size > 0)
    buf[k.total < size ? k.total : size - 1] = 0;
  return k.total;
}

int
snprintf(char *buf, int size, const char *fmt, ...)
{
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n;
}
