// syscall.c: system call dispatch and argument fetching.
//
// ABI (syscall.h): number in a7, arguments in a0..a5, result in a0. Every
// argument is untrusted: pointers are checked against the user page table
// when used (copyin/copyout), so a bad pointer, a bad number or a bad
// length makes the call return -1 and never faults the kernel.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "syscall.h"
#include "defs.h"

// Fetch the uint64 at user address addr (8-byte aligned).
// Returns 0, or -1 if addr is bad.
int
fetchaddr(uint64 addr, uint64 *ip)
{
  struct proc *p = myproc();

  if(addr % sizeof(uint64) != 0)
    return -1;
  return copyin(p->pagetable, (char *)ip, addr, sizeof(*ip));
}

// Fetch the NUL-terminated string at user address addr into buf (max
// bytes including the NUL). Returns its length, or -1.
int
fetchstr(uint64 addr, char *buf, int max)
{
  struct proc *p = myproc();

  if(copyinstr(p->pagetable, buf, addr, max) < 0)
    return -1;
  return strlen(buf);
}

static uint64
argraw(int n)
{
  struct proc *p = myproc();

  switch(n){
  case 0:
    return p->trapframe->a0;
  case 1:
    return p->trapframe->a1;
  case 2:
    return p->trapframe->a2;
  case 3:
    return p->trapframe->a3;
  case 4:
    return p->trapframe->a4;
  case 5:
    return p->trapframe->a5;
  }
  panic("argraw: argument %d", n);
}

// The n'th argument as an int.
void
argint(int n, int *ip)
{
  *ip = argraw(n);
}

// The n'th argument as a pointer; it is checked when it is used.
void
argaddr(int n, uint64 *ip)
{
  *ip = argraw(n);
}

// The n'th argument as a string, copied into buf (max bytes).
// Returns its length, or -1.
int
argstr(int n, char *buf, int max)
{
  uint64 addr;

  argaddr(n, &addr);
  return fetchstr(addr, buf, max);
}

// The n'th argument as a pointer to a user object of size bytes that must
// be align-byte aligned and writable (if write) or readable user memory.
// Returns 0, or -1.
int
argptr(int n, uint64 *ip, uint64 size, int align, int write)
{
  argaddr(n, ip);
  if(*ip % align != 0)
    return -1;
  return uvmcheck(myproc()->pagetable, *ip, size, write);
}

extern uint64 sys_fork(void);
extern uint64 sys_exit(void);
extern uint64 sys_wait(void);
extern uint64 sys_pipe(void);
extern uint64 sys_read(void);
extern uint64 sys_kill(void);
extern uint64 sys_exec(void);
extern uint64 sys_fstat(void);
extern uint64 sys_chdir(void);
extern uint64 sys_dup(void);
extern uint64 sys_getpid(void);
extern uint64 sys_sbrk(void);
extern uint64 sys_sleep(void);
extern uint64 sys_uptime(void);
extern uint64 sys_open(void);
extern uint64 sys_write(void);
extern uint64 sys_mknod(void);
extern uint64 sys_unlink(void);
extern uint64 sys_link(void);
extern uint64 sys_mkdir(void);
extern uint64 sys_close(void);
extern uint64 sys_time_us(void);
extern uint64 sys_halt(void);
extern uint64 sys_procinfo(void);
extern uint64 sys_freemem(void);
extern uint64 sys_ignintr(void);
extern uint64 sys_ai_submitx(void);
extern uint64 sys_ai_wait(void);
extern uint64 sys_ai_query(void);
extern uint64 sys_ai_call(void);
extern uint64 sys_ai_worker_register(void);
extern uint64 sys_ai_worker_get(void);
extern uint64 sys_ai_worker_run(void);
extern uint64 sys_ai_worker_complete(void);
extern uint64 sys_ai_info(void);
extern uint64 sys_ai_stats(void);
extern uint64 sys_ai_lasterr(void);
extern uint64 sys_ai_read(void);

// number -> handler; numbers come from syscall.h only
static uint64 (*syscalls[])(void) = {
  [SYS_fork]     sys_fork,
  [SYS_exit]     sys_exit,
  [SYS_wait]     sys_wait,
  [SYS_pipe]     sys_pipe,
  [SYS_read]     sys_read,
  [SYS_kill]     sys_kill,
  [SYS_exec]     sys_exec,
  [SYS_fstat]    sys_fstat,
  [SYS_chdir]    sys_chdir,
  [SYS_dup]      sys_dup,
  [SYS_getpid]   sys_getpid,
  [SYS_sbrk]     sys_sbrk,
  [SYS_sleep]    sys_sleep,
  [SYS_uptime]   sys_uptime,
  [SYS_open]     sys_open,
  [SYS_write]    sys_write,
  [SYS_mknod]    sys_mknod,
  [SYS_unlink]   sys_unlink,
  [SYS_link]     sys_link,
  [SYS_mkdir]    sys_mkdir,
  [SYS_close]    sys_close,
  [SYS_time_us]  sys_time_us,
  [SYS_halt]     sys_halt,
  [SYS_procinfo] sys_procinfo,
  [SYS_freemem]  sys_freemem,
  [SYS_ignintr]  sys_ignintr,
  [SYS_ai_submitx]         sys_ai_submitx,
  [SYS_ai_wait]            sys_ai_wait,
  [SYS_ai_query]           sys_ai_query,
  [SYS_ai_call]            sys_ai_call,
  [SYS_ai_worker_register] sys_ai_worker_register,
  [SYS_ai_worker_get]      sys_ai_worker_get,
  [SYS_ai_worker_run]      sys_ai_worker_run,
  [SYS_ai_worker_complete] sys_ai_worker_complete,
  [SYS_ai_info]            sys_ai_info,
  [SYS_ai_stats]           sys_ai_stats,
  [SYS_ai_lasterr]         sys_ai_lasterr,
  [SYS_ai_read]            sys_ai_read,
};

void
syscall(void)
{
  struct proc *p = myproc();
  uint64 num = p->trapframe->a7;

  if(num < NELEM(syscalls) && syscalls[num]){
    p->trapframe->a0 = syscalls[num]();
  } else {
    printf("pid %d %s: unknown sys call %ld\n", p->pid, p->name, num);
    p->trapframe->a0 = -1;
  }
}
