// stub.c: console output, time and power for the test stubs.
#include "stub.h"

void
putc(int c)
{
  while((R8(UART0 + 5) & (1 << 5)) == 0)   // LSR.THRE
    ;
  R8(UART0) = c;
}

void
puts(const char *s)
{
  while(*s)
    putc(*s++);
}

void
puthex(uint64 v)
{
  puts("0x");
  for(int i = 60; i >= 0; i -= 4)
    putc("0123456789abcdef"[(v >> i) & 15]);
}

void
putdec(uint64 v)
{
  char buf[24];
  int i = 0;
  do { buf[i++] = '0' + v % 10; v /= 10; } while(v);
  while(i > 0)
    putc(buf[--i]);
}

uint64
rdtime(void)
{
  uint64 t;
  asm volatile("rdtime %0" : "=r"(t));
  return t;
}

void
power(int kind, int status)
{
  R32(POWER) = kind | (status << 16);
  for(;;)
    ;
}

void
power_pass(int status)
{
  power(POWER_PASS, status);
}
