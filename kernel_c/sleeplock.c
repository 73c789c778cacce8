// sleeplock.c: locks that sleep while they wait, for holding across disk
// I/O (buffers, inodes).

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "sleeplock.h"

void
initsleeplock(struct sleeplock *lk, char *name)
{
  initlock(&lk->lk, "sleep lock");
  lk->name = name;
  lk->locked = 0;
  lk->pid = 0;
  lk->waiting = 0;
}

// Wait for the lock. Not interruptible by kill(): holders always release
// it after a bounded amount of disk work.
void
acquiresleep(struct sleeplock *lk)
{
  acquire(&lk->lk);
  while(lk->locked){
    lk->waiting++;
    sleep(lk, &lk->lk);
    lk->waiting--;
  }
  lk->locked = 1;
  lk->pid = myproc()->pid;
  release(&lk->lk);
}

void
releasesleep(struct sleeplock *lk)
{
  acquire(&lk->lk);
  lk->locked = 0;
  lk->pid = 0;
  if(lk->waiting)
    wakeup(lk);
  release(&lk->lk);
}

// Does the current process hold lk?
int
holdingsleep(struct sleeplock *lk)
{
  int r;

  acquire(&lk->lk);
  r = lk->locked && (lk->pid == myproc()->pid);
  release(&lk->lk);
  return r;
}
