// timer.c: the supervisor timer (harness/devices/clint.py).
//
// mtime counts at TIMEBASE_HZ from reset; writing MTIMECMP sets a deadline,
// and the harness raises STIP (not MTIP: Unicorn cannot raise M-level
// interrupts) once mtime reaches it. A write also lowers STIP.
//
// Each hart has its own deadline (CLINT_MTIMECMP + 8*hart) and ticks on its
// own. Ticks come every 1/TICK_HZ seconds while a process runs on the hart,
// for preemption. When the scheduler finds nothing to run it calls timer_idle()
// before wfi, which sets the deadline to the earliest wake-up of a process
// in sleep(n), or disarms the timer when nobody sleeps: an idle machine
// takes no interrupts at all (or one per sleeper), and the harness thread
// can sleep until then. ticks is derived from mtime, so it stays right
// across such gaps.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "bootinfo.h"
#include "spinlock.h"
#include "riscv.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"

#define TICK_INTERVAL (TIMEBASE_HZ / TICK_HZ)   // mtime units per tick
#define NEVER         (~0UL)

struct spinlock tickslock;
uint ticks;                     // timer ticks since boot; tickslock
static int ticksleepers;        // processes in sleep(n); tickslock
static uint wakeat[NPROC];      // their wake-up ticks (0 = free); tickslock
// per hart, used only by that hart with interrupts off
static uint64 deadline[NCPU];   // what its MTIMECMP holds (NEVER = disarmed)
static int ticking[NCPU];       // deadline is a preemption tick, not idle's

static void
setdeadline(uint64 t)
{
  int hart = cpuid();

  deadline[hart] = t;
  *(volatile uint64*)(CLINT_MTIMECMP + CLINT_MTIMECMP_STRIDE * hart) = t;
}

void
timerinit(void)
{
  initlock(&tickslock, "time");
  timerinithart();
}

// This hart's timer starts disarmed.
void
timerinithart(void)
{
  setdeadline(NEVER);
}

// mtime units since the harness started the kernel
uint64
boottime(void)
{
  return r_time() - bootinfo.boot_mtime;
}

// Microseconds since boot.
uint64
time_us(void)
{
  uint64 t = boottime(), hz = bootinfo.timebase_hz;

  return (t / hz) * 1000000 + (t % hz) * 1000000 / hz;
}

// Make sure a preemption tick will come; the scheduler calls this before
// running a process. After an idle period the deadline may be a sleeper's
// wake-up far away (or none): bring it to the next tick.
void
timer_arm(void)
{
  uint64 next;
  int hart = cpuid();

  if(ticking[hart])
    return;
  next = r_time() + TICK_INTERVAL;
  if(next < deadline[hart])
    setdeadline(next);
  ticking[hart] = 1;
}

// Nothing is runnable: let the timer fire only when the earliest sleep(n)
// ends, or never if nobody sleeps. Called by the scheduler with interrupts
// off, right before wfi. (Every idle hart arms the earliest wake-up; the
// first to take it wakes the sleeper, the others find nothing and idle on.)
void
timer_idle(void)
{
  uint soonest = 0;
  int i, hart = cpuid();

  ticking[hart] = 0;
  acquire(&tickslock);
  for(i = 0; i < NPROC && ticksleepers > 0; i++)
    if(wakeat[i] && (soonest == 0 || wakeat[i] < soonest))
      soonest = wakeat[i];
  release(&tickslock);
  if(soonest)
    setdeadline(bootinfo.boot_mtime + (uint64)soonest * TICK_INTERVAL);
  else if(deadline[hart] != NEVER)
    setdeadline(NEVER);
}

// The timer interrupt: update ticks, wake sleep()ers, set the next deadline.
void
timerintr(void)
{
  uint64 now = r_time();

  acquire(&tickslock);
  ticks = (now - bootinfo.boot_mtime) / TICK_INTERVAL;
  wakeup(&ticks);
  release(&tickslock);
  setdeadline(now + TICK_INTERVAL);
  ticking[cpuid()] = 1;
}

// Sleep for n ticks. Returns 0, or -1 if the process was killed.
int
ticksleep(int n)
{
  uint ticks0;
  int slot, r = 0;

  acquire(&tickslock);
  ticks = boottime() / TICK_INTERVAL;
  ticks0 = ticks;
  // at most NPROC processes sleep at once, so a slot is free
  for(slot = 0; slot < NPROC && wakeat[slot] != 0; slot++)
    ;
  if(slot == NPROC)
    panic("ticksleep: no wake-up slot");
  wakeat[slot] = ticks0 + n > 0 ? ticks0 + n : 1;
  ticksleepers++;
  while(ticks - ticks0 < n){
    if(killed(myproc())){
      r = -1;
      break;
    }
    sleep(&ticks, &tickslock);
  }
  wakeat[slot] = 0;
  ticksleepers--;
  release(&tickslock);
  return r;
}

// Ticks since boot, fresh from mtime.
uint
uptime(void)
{
  return boottime() / TICK_INTERVAL;
}
