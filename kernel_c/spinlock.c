// spinlock.c: spinning mutual-exclusion locks.
//
// Holding a spinlock keeps interrupts off on this hart (push_off), so an
// interrupt handler can never spin on a lock its own hart already holds.
//
// The lock word holds 0 when free, else the holder's token (hart id + 1),
// taken with lr.w/sc.w. The token makes taking a lock safe against one
// harness artefact: when the harness stops a run asynchronously (to switch
// harts or take an event) right after an AMO or SC has written memory,
// Unicorn can leave the PC on that instruction and execute it again when
// the hart resumes. A repeated sc.w then fails, and the loop's next lr.w
// finds our own token in the word: we hold the lock. Nobody else ever
// writes our token, so that answer is exact.
//
// The kernel's other AMOs survive a repeat too (ipi.c's masks, icache.c's
// counter). This symbol says so to the harness, which would otherwise hook
// every AMO and SC of the image to keep such stops away from them
// (harness/machine/board.py, ATOMICS_SURVIVE_REPEAT): a cost on every acquire.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"

const int atomics_survive_repeat = 1;

void
initlock(struct spinlock *lk, char *name)
{
  lk->name = name;
  lk->locked = 0;
  lk->cpu = 0;
}

// One attempt: 1 if the lock is ours (now, or already by our own repeated
// sc.w, see above), 0 if another hart holds it.
static int
trylock(uint *word, uint token)
{
  uint old, fail;

  asm volatile(
    "1: lr.w.aq %0, (%2)\n"
    "   bnez    %0, 2f\n"
    "   sc.w    %1, %3, (%2)\n"
    "   bnez    %1, 1b\n"
    "2:\n"
    : "=&r"(old), "=&r"(fail)
    : "r"(word), "r"(token)
    : "memory");
  return old == 0 || old == token;
}

// Spin until the lock is ours. Re-acquiring a held lock is a kernel bug.
void
acquire(struct spinlock *lk)
{
  uint token;

  push_off();
  if(holding(lk))
    panic("acquire: %s already held", lk->name);
  token = r_tp() + 1;   // cpuid() + 1, without the call
  while(!trylock(&lk->locked, token))
    cpu_pause();   // another hart holds it: let the harness run that hart

  // keep the critical section's loads and stores after the lock is taken
  __sync_synchronize();
  lk->cpu = mycpu();
}

void
release(struct spinlock *lk)
{
  if(!holding(lk))
    panic("release: %s not held", lk->name);
  lk->cpu = 0;
  // make the critical section's stores visible before the lock is free;
  // a plain store (not an AMO): repeating it is harmless
  __sync_synchronize();
  *(volatile uint *)&lk->locked = 0;
  pop_off();
}

// Is this hart holding the lock? Caller has interrupts off.
int
holding(struct spinlock *lk)
{
  return lk->locked && lk->cpu == mycpu();
}

// push_off/pop_off are intr_off/intr_on that nest: two push_off()s take
// two pop_off()s, and interrupts come back on only if they were on at the
// first push_off().
void
push_off(void)
{
  // off, and were they on? in one instruction: a lock pair's CSR
  // instructions are most of its cost in the emulator (see myproc())
  int old = (CSR_READ_CLEAR(sstatus, SSTATUS_SIE) & SSTATUS_SIE) != 0;
  struct cpu *c;

  c = mycpu();   // only now: with interrupts off we cannot move
  if(c->noff == 0)
    c->intena = old;
  c->noff += 1;
}

void
pop_off(void)
{
  struct cpu *c = mycpu();

  if(intr_get())
    panic("pop_off: interruptible");
  if(c->noff < 1)
    panic("pop_off: unbalanced");
  c->noff -= 1;
  if(c->noff == 0 && c->wakeidle)
    ipi_flush();   // a deferred wake-up of an idle hart (ipi.c)
  if(c->noff == 0 && c->intena)
    intr_on();
}
