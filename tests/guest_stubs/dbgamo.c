// dbgamo.c: a plain store, an AMO and an LR/SC pair on one watched word.
#include "stub.h"

volatile uint32 counter;

int
main(uint64 hartid, void *bi)
{
  uint32 old, sc, lr;
  counter = 5;
  asm volatile("amoadd.w %0, %2, (%1)" : "=r"(old) : "r"(&counter), "r"(3) : "memory");
  asm volatile("lr.w %0, (%2)\n sc.w %1, %3, (%2)"
               : "=&r"(lr), "=&r"(sc) : "r"(&counter), "r"(42) : "memory");
  puts("counter ");
  putdec(counter);
  puts(" amo ");
  putdec(old);
  puts(" lr ");
  putdec(lr);
  puts(" sc ");
  putdec(sc);
  puts("\n");
  return 0;
}
