// hang.c: guests for the hang detector (harness/machine/watchdog.py). bootinfo.cmd:
//   "spin"   a kernel loop with interrupts off: never idle, never progresses
//   "wfi"    idle with nothing armed: a lost wakeup (nothing will come)
//   "timer"  idle with a timer deadline 2 s ahead (legitimate), then exit 0
//   "talk"   prints a dot every 50 ms for 2 s (progress), then exit 0
#include "stub.h"
#include "bootinfo.h"

static int
is(const char *a, const char *b)
{
  while(*a && *a == *b)
    a++, b++;
  return *a == *b;
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  uint64 until;

  csrw(stvec, trapvec);
  if(is(bi->cmd, "spin")){
    puts("spinning\n");
    for(;;)
      ;
  }
  if(is(bi->cmd, "wfi")){
    puts("waiting for nothing\n");
    for(;;)
      asm volatile("wfi");
  }
  if(is(bi->cmd, "timer")){
    until = rdtime() + 2 * TIMEBASE_HZ;
    csrs(sie, SIE_STIE);               // wfi ends on STIP; sstatus.SIE stays off
    R64(CLINT_MTIMECMP) = until;
    while(rdtime() < until)
      asm volatile("wfi");
    puts("woken\n");
    return 0;
  }
  if(is(bi->cmd, "talk")){
    until = rdtime() + 2 * TIMEBASE_HZ;
    while(rdtime() < until){
      uint64 next = rdtime() + TIMEBASE_HZ / 20;
      while(rdtime() < next)
        ;
      putc('.');
    }
    putc('\n');
    return 0;
  }
  return 3;
}

void
trap(struct frame *f)
{
  power(POWER_FAIL, 9);
}
