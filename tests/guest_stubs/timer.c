// timer.c: supervisor timer interrupts from the CLINT comparator, rdtime emulation,
// and wfi. bootinfo.cmd "wfi" waits in wfi between ticks, "busy" spins (the harness
// must end its run slice at the deadline to deliver the interrupt).
#include "stub.h"
#include "bootinfo.h"

#define INTERVAL (TIMEBASE_HZ / 100)   // 10 ms
#define NTICKS 5

volatile int ticks;
volatile uint64 spins;

void
trap(struct frame *f)
{
  uint64 scause = csrr(scause);

  if(scause != ((1UL << 63) | 5)){
    puts("unexpected trap ");
    puthex(scause);
    putc('\n');
    power(POWER_FAIL, 2);
  }
  ticks++;
  R64(CLINT_MTIMECMP) = ticks < NTICKS ? rdtime() + INTERVAL : ~0UL;
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  int busy = bi->cmd[0] == 'b';
  uint64 t0, t1, m0;

  csrw(stvec, trapvec);
  t0 = rdtime();
  m0 = R64(CLINT_MTIME);
  if(m0 < t0){
    puts("mtime went backwards\n");
    return 1;
  }
  csrs(sie, SIE_STIE);
  R64(CLINT_MTIMECMP) = m0 + INTERVAL;
  csrs(sstatus, SSTATUS_SIE);
  while(ticks < NTICKS){
    if(busy)
      spins++;
    else
      asm volatile("wfi");
  }
  t1 = rdtime();
  puts("ticks ");
  putdec(ticks);
  puts(t1 - t0 >= NTICKS * INTERVAL ? " ok\n" : " too early\n");
  if(busy && spins == 0)
    puts("never spun\n");
  return 0;
}
