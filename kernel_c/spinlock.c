// spinlock.c: spinning mutual-exclusion locks.
//
// Holding a spinlock keeps interrupts off on this hart (push_off), so an
// interrupt handler can never spin on a lock its own hart already holds.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"

void
initlock(struct spinlock *lk, char *name)
{
  lk->name = name;
  lk->locked = 0;
  lk->cpu = 0;
}

// Spin until the lock is ours. Re-acquiring a held lock is a kernel bug.
void
acquire(struct spinlock *lk)
{
  push_off();
  if(holding(lk))
    panic("acquire: %s already held", lk->name);

#if NCPU == 1
  // One hart, interrupts off: nothing else runs, so plain loads and stores
  // take the lock. No AMO on purpose: when the harness stops a run
  // asynchronously (emu_stop) right at an AMO, Unicorn can leave the PC on
  // the AMO after executing it, and the resumed run executes it again; a
  // doubled amoswap here would spin forever on the lock it just took.
  while(*(volatile uint *)&lk->locked != 0)
    ;
  *(volatile uint *)&lk->locked = 1;
#else
  // amoswap.w.aq: atomically set locked, see the old value
  while(__sync_lock_test_and_set(&lk->locked, 1) != 0)
    ;
#endif

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
  // make the critical section's stores visible before the lock is free
  __sync_synchronize();
#if NCPU == 1
  *(volatile uint *)&lk->locked = 0;   // no AMO: see acquire()
#else
  __sync_lock_release(&lk->locked);
#endif
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
  int old = intr_get();

  intr_off();
  if(mycpu()->noff == 0)
    mycpu()->intena = old;
  mycpu()->noff += 1;
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
  if(c->noff == 0 && c->intena)
    intr_on();
}
