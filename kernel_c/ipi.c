// ipi.c: inter-processor interrupts (harness/devices/sswi.py).
//
// Writing 1 to SSWI + 4*hart raises that hart's supervisor software
// interrupt (SSIP), in the manner of the RISC-V ACLINT SSWI device. What
// the sender wants is a bit in the target's cpus[].ipi, set before the
// interrupt is raised; the target clears SSIP and then takes the bits.
//
//   IPI_WAKE    work appeared: an idle hart leaves wfi and rescans
//   IPI_FENCE_I run fence.i (SBI's remote_fence_i): code another hart wrote
//               must not run from a stale instruction cache
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
  why = c->ipi;
  if(why)
    __sync_fetch_and_and(&c->ipi, ~why);
  if(why & IPI_FENCE_I)
    fence_i();
  // IPI_WAKE needs nothing more: the hart is out of wfi
}

// Work appeared (a process became RUNNABLE): wake one idle hart, if any,
// once this hart holds no spinlock (pop_off calls ipi_flush). Callers
// usually hold the lock the woken process needs first (a pipe's, the
// sleep channel's); woken at once, it would only spin on it.
void
ipi_wake_idle(void)
{
  push_off();
  mycpu()->wakeidle = 1;
  pop_off();
}

// Send the IPI ipi_wake_idle() asked for. Interrupts are off. Pairs with
// the scheduler, which sets c->idle before its last scan: the RUNNABLE
// store came before this, so either that scan sees it or we see c->idle.
void
ipi_flush(void)
{
  struct cpu *c = mycpu();
  int i, me = cpuid();

  c->wakeidle = 0;
  __sync_synchronize();
  for(i = 0; i < bootinfo.ncpu; i++){
    if(i != me && cpus[i].started && cpus[i].idle){
      ipi_send(i, IPI_WAKE);
      break;
    }
  }
}

// fence.i here and on every other running hart (after exec wrote new text).
void
fence_i_all(void)
{
  int i, me;

  __sync_synchronize();
  push_off();
  me = cpuid();
  fence_i();
  for(i = 0; i < bootinfo.ncpu; i++)
    if(i != me && cpus[i].started)
      ipi_send(i, IPI_FENCE_I);
  pop_off();
}
