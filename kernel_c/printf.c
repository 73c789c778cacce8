// printf.c: formatted console output for the kernel, and panic().
//
// printf() serialises whole messages with pr.lock. Output is polled through
// uartputc_sync(), so it works from any context, including interrupt
// handlers and before the scheduler runs. panic() bypasses the lock (the
// lock's holder might be the thing that broke) and then powers the machine
// off through the power device with POWER_FAIL | (1 << 16); the harness
// prints registers and a backtrace from there.

#include <stdarg.h>

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "defs.h"

volatile int panicking = 0;   // set once panic() starts; stops other output

static struct {
  struct spinlock lock;
  int locking;                // 0 while panicking
} pr;

static const char digits[] = "0123456789abcdef";

static void
printint(uint64 x, int base, int sign, int width, int zero)
{
  char buf[24];
  int i = 0, neg = 0;

  if(sign && (long)x < 0){
    neg = 1;
    x = -(long)x;
  }
  do {
    buf[i++] = digits[x % base];
  } while((x /= base) != 0);
  if(neg && zero)
    consputc('-');
  while(i + neg < width--)
    consputc(zero ? '0' : ' ');
  if(neg && !zero)
    consputc('-');
  while(--i >= 0)
    consputc(buf[i]);
}

// %d %u %x %p %s %c %% with an optional width ("%5d", "%08x") and the
// l/ll size prefixes ("%ld", "%lx")
static void
vprintf(const char *fmt, va_list ap)
{
  int c, lng, width, zero;
  const char *s;

  for(; (c = *fmt & 0xff) != 0; fmt++){
    if(c != '%'){
      consputc(c);
      continue;
    }
    c = *++fmt & 0xff;
    zero = width = lng = 0;
    if(c == '0'){
      zero = 1;
      c = *++fmt & 0xff;
    }
    for(; c >= '0' && c <= '9'; c = *++fmt & 0xff)
      width = width * 10 + c - '0';
    for(; c == 'l'; c = *++fmt & 0xff)
      lng = 1;
    switch(c){
    case 'd':
      printint(lng ? va_arg(ap, long) : va_arg(ap, int), 10, 1, width, zero);
      break;
    case 'u':
      printint(lng ? va_arg(ap, uint64) : va_arg(ap, uint), 10, 0,
               width, zero);
      break;
    case 'x':
      printint(lng ? va_arg(ap, uint64) : va_arg(ap, uint), 16, 0,
               width, zero);
      break;
    case 'p':
      consputc('0');
      consputc('x');
      printint(va_arg(ap, uint64), 16, 0, width, zero);
      break;
    case 'c':
      consputc(va_arg(ap, int));
      break;
    case 's':
      if((s = va_arg(ap, const char*)) == 0)
        s = "(null)";
      for(; *s; s++)
        consputc(*s);
      break;
    case '%':
      consputc('%');
      break;
    case 0:
      return;
    default:
      // unknown conversion: show it as written
      consputc('%');
      consputc(c);
      break;
    }
  }
}

int
printf(const char *fmt, ...)
{
  va_list ap;
  int locking = pr.locking;

  if(locking)
    acquire(&pr.lock);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  if(locking)
    release(&pr.lock);
  return 0;
}

// Report a broken kernel invariant and stop the machine. The message names
// the function that found it ("bget: no buffers").
void
panic(const char *fmt, ...)
{
  va_list ap;

  intr_off();
  pr.locking = 0;
  panicking = 1;
  consputc('\n');
  for(const char *s = "panic: "; *s; s++)
    consputc(*s);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  consputc('\n');
  poweroff(POWER_FAIL, 1);
}

void
printfinit(void)
{
  initlock(&pr.lock, "pr");
  pr.locking = 1;
}
