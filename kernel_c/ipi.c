// ipi.c: inter-processor interrupts (harness/devices/sswi.py).
//
// Writing 1 to SSWI + 4*hart raises that hart's supervisor software
// interrupt (SSIP), in the manner of the RISC-V ACLINT SSWI device. What
// the sender wants is a bit in the target's cpus[].ipi, set before the
// interrupt is raised; the target clears SSIP and then takes the bits.
//
//   IPI_WAKE    work appeared: an idle hart leaves wfi and rescans
//
// (Harts fence.i themselves when user code may have changed: icache.c.)
//
// Set and clear with AMOs whose repetition is harmless (amoor, amoand with
// a mask): see spinlock.c for why a harness stop may repeat one.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "bootinfo.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "racy.h"
#include "defs.h"

#define SSWI_REG(h) (*(volatile uint32*)(SSWI + 4*(h)))

extern struct bootinfo bootinfo;

void
ipi_send(int hart, uint why)
{
  __sync_fetch_and_or(&cpus[hart].ipi, why);
  __sync_synchronize();
  SSWI_REG(hart) = 1;
}

// The supervisor software interrupt on this hart.
void
ipi_intr(void)
{
  struct cpu *c = mycpu();
  uint why;

  CSR_CLEAR(sip, SIE_SSIE);
  DATA_RACE_NEXT_LINE("a snapshot: only the bits seen are cleared (by AMO); a bit set since stays for the next interrupt");
  why = c->ipi;
  if(why)
    __sync_fetch_and_and(&c->ipi, ~why);
  // IPI_WAKE needs nothing more: the hart is out of wfi
}

// Work appeared (n processes became RUNNABLE): wake an idle hart, if any,
// once this hart holds no spinlock (pop_off calls ipi_flush). Callers
// usually hold the lock the woken process needs first (a pipe's, the
// sleep channel's); woken at once, it would only spin on it.
void
ipi_wake_idle(int n)
{
  push_off();
  mycpu()->wakeidle += n;
  pop_off();
}

// Send the IPI ipi_wake_idle() asked for. Interrupts are off. Pairs with
// the scheduler, which sets c->idle before its last scan: the RUNNABLE
// store came before this, so either that scan sees it or we see c->idle.
// A hart without a process (an interrupt taken in its scheduler loop)
// scans next and runs the first woken process itself: an idle hart woken
// for that one would only race it there (and in the harness costs a hart
// switch), so only the others are handed on. An idle hart whose IPI_WAKE
// is still pending is on its way already: it clears the bit before it
// scans, so it will see this work too, and another IPI (one per round trip
// of a pipe ping-pong on one busy hart) would only cost a device access.
void
ipi_flush(void)
{
  struct cpu *c = mycpu();
  int i, to = -1, me = cpuid();
  int n = c->wakeidle - (c->proc == 0);

  c->wakeidle = 0;
  if(n <= 0)
    return;
  __sync_synchronize();
  for(i = 0; i < bootinfo.ncpu; i++){
    DATA_RACE_NEXT_LINE("idle handshake with scheduler(): read after a fence, a stale value costs one IPI or is caught by its rescan");
    if(i == me || !cpus[i].started || !cpus[i].idle)
      continue;
    DATA_RACE_NEXT_LINE("a pending IPI_WAKE bit is a hint: the target clears it before it scans");
    if(cpus[i].ipi & IPI_WAKE)
      return;
    if(to < 0)
      to = i;
  }
  if(to >= 0)
    ipi_send(to, IPI_WAKE);
}
