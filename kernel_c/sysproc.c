// sysproc.c: system calls about processes, time and the machine.

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"

uint64
sys_exit(void)
{
  int n;

  argint(0, &n);
  exit(n);
  return 0;     // not reached
}

uint64
sys_getpid(void)
{
  return myproc()->pid;
}

uint64
sys_fork(void)
{
  return fork();
}

// wait(int *status): status may be 0; otherwise an aligned int pointer
uint64
sys_wait(void)
{
  uint64 p;

  argaddr(0, &p);
  if(p != 0 && argptr(0, &p, sizeof(int), sizeof(int), 1) < 0)
    return -1;
  return wait(p);
}

// sbrk(n): grow or shrink memory by n bytes; returns the old break
uint64
sys_sbrk(void)
{
  uint64 addr;
  int n;

  argint(0, &n);
  addr = myproc()->sz;
  if(growproc(n) < 0)
    return -1;
  return addr;
}

// sleep(ticks)
uint64
sys_sleep(void)
{
  int n;

  argint(0, &n);
  if(n < 0)
    return -1;
  return ticksleep(n);
}

uint64
sys_kill(void)
{
  int pid;

  argint(0, &pid);
  return kill(pid);
}

// timer ticks since boot
uint64
sys_uptime(void)
{
  return uptime();
}

// microseconds since boot
uint64
sys_time_us(void)
{
  return time_us();
}

// halt(status): power the machine off with that exit status
uint64
sys_halt(void)
{
  int status;

  argint(0, &status);
  poweroff(POWER_PASS, status);
  return 0;     // not reached
}

// procinfo(struct procinfo *p, int n): up to n rows of the process table
uint64
sys_procinfo(void)
{
  uint64 p;
  int n;

  argint(1, &n);
  if(n < 0)
    return -1;
  if(n > NPROC)
    n = NPROC;
  if(argptr(0, &p, (uint64)n * sizeof(struct procinfo), sizeof(uint64), 1) < 0)
    return -1;
  return procinfo(p, n);
}

// free physical pages
uint64
sys_freemem(void)
{
  return kfreepages();
}

// ignintr(on): 1 = console ^C spares this process until its next exec
uint64
sys_ignintr(void)
{
  int on, old;
  struct proc *p = myproc();

  argint(0, &on);
  if(on != 0 && on != 1)
    return -1;
  old = p->ignintr;
  p->ignintr = on;
  return old;
}
