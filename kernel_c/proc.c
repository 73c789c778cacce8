// proc.c: processes: creation (fork), exit, wait, kill, the scheduler, and
// sleep/wakeup.
//
// Locking follows xv6: p->lock protects a process's state, chan, killed,
// xstate and pid; wait_lock protects every p->parent and orders exit()
// against wait(). Take wait_lock before any p->lock.
//
// Every hart runs scheduler(). A hart with nothing to run marks itself idle
// and waits in wfi with its timer off; whoever makes a process RUNNABLE
// wakes one idle hart with an IPI (ipi_wake_idle). A hart runs a process
// only after a fence.i if code pages were freed (and maybe refilled) since
// its last one, so it never runs stale code (icache.c).
//
// A process leaves through exit() only. Before it closes its files, exit()
// runs the exit hooks that subsystems registered with exithook_register()
// (the AI service drops the dead process's requests there), while the
// process is still intact and may sleep.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "vmlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "racy.h"
#include "proc.h"
#include "defs.h"

struct cpu cpus[NCPU];
struct proc proc[NPROC];
static struct proc *initproc;

static int nextpid = 1;
static struct spinlock pid_lock;
static struct spinlock wait_lock;

static exithook_t exithooks[NEXITHOOK];
static int nexithooks;

extern char trampoline[];       // trampoline.S

static void freeproc(struct proc *p);
void forkret(void);

// Allocate and map every slot's kernel stack, each below a guard page.
void
proc_mapstacks(pagetable_t kpgtbl)
{
  int i, j;
  char *pa;

  for(i = 0; i < NPROC; i++){
    for(j = 0; j < KSTACKPAGES; j++){
      if((pa = kalloc()) == 0)
        panic("proc_mapstacks: out of memory");
      kvmmap(kpgtbl, KSTACK(i) + j*PGSIZE, (uint64)pa, PGSIZE, PTE_R | PTE_W);
    }
  }
}

void
procinit(void)
{
  struct proc *p;

  initlock(&pid_lock, "nextpid");
  initlock(&wait_lock, "wait_lock");
  for(p = proc; p < &proc[NPROC]; p++){
    initlock(&p->lock, "proc");
    p->state = UNUSED;
    p->kstack = KSTACK((int)(p - proc));
  }
}

// Register fn to run in every exiting process (see the note at the top).
void
exithook_register(exithook_t fn)
{
  if(nexithooks >= NEXITHOOK)
    panic("exithook_register: too many hooks");
  exithooks[nexithooks++] = fn;
}

// This hart's id; interrupts must be off so we cannot move.
int
cpuid(void)
{
  return r_tp();
}

// The running process, or 0 in the scheduler.
//
// Read off the stack pointer instead of mycpu()->proc: each process slot
// has its own kernel stack at KSTACK(slot) (vmlayout.h) and the scheduler
// and boot run on stack0, so sp names the running process whatever hart it
// migrated to, and there is no window in which to disable interrupts. That
// saves three CSR instructions per call (several calls per system call),
// and in the emulator every CSR instruction ends a translated block, which
// costs about fifty plain instructions. sched() checks it against c->proc.
struct proc*
myproc(void)
{
  uint64 slot = KSTACK_SLOT(r_sp());

  return slot < NPROC ? &proc[slot] : 0;
}

static int
allocpid(void)
{
  int pid;

  acquire(&pid_lock);
  pid = nextpid++;
  release(&pid_lock);
  return pid;
}

// Find an UNUSED slot and set it up to run in the kernel (at forkret()).
// Returns it with p->lock held, or 0 if the table or memory is full.
static struct proc*
allocproc(void)
{
  struct proc *p;

  for(p = proc; p < &proc[NPROC]; p++){
    acquire(&p->lock);
    if(p->state == UNUSED)
      goto found;
    release(&p->lock);
  }
  return 0;

found:
  p->pid = allocpid();
  p->state = USED;
  p->cpu = -1;
  p->cputicks = 0;
  p->ignintr = 0;
  p->sz = 0;
  p->heapbase = 0;

  if((p->trapframe = (struct trapframe *)kalloc()) == 0){
    freeproc(p);
    release(&p->lock);
    return 0;
  }
  memset(p->trapframe, 0, PGSIZE);

  if((p->pagetable = proc_pagetable(p)) == 0){
    freeproc(p);
    release(&p->lock);
    return 0;
  }

  // the first swtch() to the process lands in forkret() on its stack; s0
  // = 0 ends backtraces there
  memset(&p->context, 0, sizeof(p->context));
  p->context.ra = (uint64)forkret;
  p->context.sp = p->kstack + KSTACKSIZE;
  return p;
}

// Free a slot and everything it holds except open files and cwd (exit()
// releases those). Caller holds p->lock.
static void
freeproc(struct proc *p)
{
  if(p->trapframe)
    kfree((void*)p->trapframe);
  p->trapframe = 0;
  if(p->pagetable)
    proc_freepagetable(p->pagetable, p->sz);
  p->pagetable = 0;
  p->sz = 0;
  p->heapbase = 0;
  p->pid = 0;
  p->parent = 0;
  p->name[0] = 0;
  p->chan = 0;
  p->killed = 0;
  p->xstate = 0;
  p->ignintr = 0;
  p->state = UNUSED;
}

// A user page table with nothing but the trampoline and the trapframe.
// Returns 0 when out of memory.
pagetable_t
proc_pagetable(struct proc *p)
{
  pagetable_t pagetable;

  if((pagetable = uvmcreate()) == 0)
    return 0;
  // no PTE_U: only the kernel, on its way in and out, uses these
  if(mappages(pagetable, TRAMPOLINE, PGSIZE,
              (uint64)trampoline, PTE_R | PTE_X) < 0){
    uvmfree(pagetable, 0);
    return 0;
  }
  if(mappages(pagetable, TRAPFRAME, PGSIZE,
              (uint64)(p->trapframe), PTE_R | PTE_W) < 0){
    uvmunmap(pagetable, TRAMPOLINE, 1, 0);
    uvmfree(pagetable, 0);
    return 0;
  }
  return pagetable;
}

// Free a user page table and the sz bytes of user memory it maps.
void
proc_freepagetable(pagetable_t pagetable, uint64 sz)
{
  uvmunmap(pagetable, TRAMPOLINE, 1, 0);
  uvmunmap(pagetable, TRAPFRAME, 1, 0);
  uvmfree(pagetable, sz);
}

// Create the first process. It has no user memory yet: when it first runs,
// forkret() mounts the file system and execs /init (start_init, main.c).
void
userinit(void)
{
  struct proc *p;

  if((p = allocproc()) == 0)
    panic("userinit: no memory");
  initproc = p;
  safestrcpy(p->name, "init", sizeof(p->name));
  p->state = RUNNABLE;
  release(&p->lock);
}

// Grow (n > 0) or shrink (n < 0) user memory by n bytes. Returns 0, or -1
// (memory unchanged) if the new size is out of range or memory runs out.
int
growproc(int n)
{
  struct proc *p = myproc();
  uint64 sz = p->sz, newsz;

  if(n > 0){
    newsz = sz + n;
    if(newsz > TRAPFRAME)
      return -1;
    // refuse at once what cannot fit, rather than take all of RAM first
    if((PGROUNDUP(newsz) - PGROUNDUP(sz)) / PGSIZE > kfreepages())
      return -1;
    if(uvmalloc(p->pagetable, sz, newsz, PTE_W) == 0)
      return -1;
  } else if(n < 0){
    if((uint64)(-(long)n) > sz - p->heapbase)
      return -1;
    newsz = uvmdealloc(p->pagetable, sz, sz + n);
  } else {
    newsz = sz;
  }
  p->sz = newsz;
  return 0;
}

// Create a copy of the calling process. Returns the child's pid in the
// parent and 0 in the child, or -1 if the table or memory is full.
int
fork(void)
{
  int i, pid;
  struct proc *np;
  struct proc *p = myproc();

  if((np = allocproc()) == 0)
    return -1;

  if(uvmcopy(p->pagetable, np->pagetable, p->sz) < 0){
    freeproc(np);
    release(&np->lock);
    return -1;
  }
  np->sz = p->sz;
  np->heapbase = p->heapbase;

  // the child returns from the same system call, with 0
  *(np->trapframe) = *(p->trapframe);
  np->trapframe->a0 = 0;

  for(i = 0; i < NOFILE; i++)
    if(p->ofile[i])
      np->ofile[i] = filedup(p->ofile[i]);
  np->cwd = idup(p->cwd);
  safestrcpy(np->name, p->name, sizeof(p->name));
  np->ignintr = p->ignintr;

  pid = np->pid;
  release(&np->lock);

  acquire(&wait_lock);
  np->parent = p;
  release(&wait_lock);

  acquire(&np->lock);
  np->state = RUNNABLE;
  release(&np->lock);
  ipi_wake_idle(1);

  return pid;
}

// Give p's children to init. Caller holds wait_lock.
static void
reparent(struct proc *p)
{
  struct proc *pp;

  for(pp = proc; pp < &proc[NPROC]; pp++){
    if(pp->parent == p){
      pp->parent = initproc;
      wakeup(initproc);
    }
  }
}

// End the calling process with a status for wait(). The slot stays a
// ZOMBIE until the parent's wait() frees it. Does not return.
void
exit(int status)
{
  struct proc *p = myproc();
  int fd, i;

  if(p == initproc){
    // nothing can run without init; its status is the machine's
    printf("init exited with status %d: powering off\n", status);
    poweroff(POWER_PASS, status);
  }

  for(i = 0; i < nexithooks; i++)
    exithooks[i](p);

  for(fd = 0; fd < NOFILE; fd++){
    if(p->ofile[fd]){
      fileclose(p->ofile[fd]);
      p->ofile[fd] = 0;
    }
  }
  if(p->cwd){
    begin_op();
    iput(p->cwd);
    end_op();
  }
  p->cwd = 0;

  acquire(&wait_lock);
  reparent(p);
  // the parent may be asleep in wait()
  wakeup(p->parent);

  acquire(&p->lock);
  p->xstate = status;
  p->state = ZOMBIE;
  release(&wait_lock);

  sched();
  panic("exit: zombie %d ran", p->pid);
}

// Wait for a child to exit; store its status at user address addr unless
// addr is 0. Returns its pid, or -1 if there are no children, the process
// was killed, or addr is bad (the child then stays a zombie).
int
wait(uint64 addr)
{
  struct proc *pp;
  int havekids, pid;
  struct proc *p = myproc();

  acquire(&wait_lock);
  for(;;){
    havekids = 0;
    for(pp = proc; pp < &proc[NPROC]; pp++){
      if(pp->parent != p)
        continue;
      // make sure the child is not still in exit() or swtch()
      acquire(&pp->lock);
      havekids = 1;
      if(pp->state == ZOMBIE){
        pid = pp->pid;
        if(addr != 0 && copyout(p->pagetable, addr, (char *)&pp->xstate,
                                sizeof(pp->xstate)) < 0){
          release(&pp->lock);
          release(&wait_lock);
          return -1;
        }
        freeproc(pp);
        release(&pp->lock);
        release(&wait_lock);
        return pid;
      }
      release(&pp->lock);
    }

    if(!havekids || killed(p)){
      release(&wait_lock);
      return -1;
    }
    sleep(p, &wait_lock);
  }
}

// Each hart's scheduler loop, entered from main() and never left. Pick a
// RUNNABLE process round-robin, swtch() to it, and get control back when
// it calls sched(). With nothing to run: stop the timer if nobody needs
// ticks and wait for an interrupt.
// Is any process RUNNABLE? A hint read without locks.
static int
anyrunnable(void)
{
  struct proc *p;

  for(p = proc; p < &proc[NPROC]; p++){
    DATA_RACE_NEXT_LINE("a hint only: the scheduler's pass checks p->state under p->lock");
    if(*(volatile enum procstate *)&p->state == RUNNABLE)
      return 1;
  }
  return 0;
}

void
scheduler(void)
{
  struct proc *p;
  struct cpu *c = mycpu();
  int found, me = cpuid();

  c->proc = 0;
  for(;;){
    // a pending device interrupt may make someone runnable
    intr_on();
    intr_off();

    found = 0;
    for(p = proc; p < &proc[NPROC]; p++){
      // a look without the lock first, to skip most slots cheaply: one
      // made RUNNABLE just after is found by the next pass, as it would be
      // had it turned RUNNABLE after we locked its slot
      DATA_RACE_NEXT_LINE("a hint only: p->state is checked again under p->lock");
      if(p->state != RUNNABLE)
        continue;
      acquire(&p->lock);
      if(p->state == RUNNABLE){
        // the process releases p->lock and re-acquires it before
        // jumping back to us
        p->state = RUNNING;
        c->proc = p;
        // pages of freed code may have been refilled with this
        // process's text since this hart last translated code (icache.c)
        icache_sync();
        p->cpu = me;
        timer_arm();
        swtch(&c->context, &p->context);
        c->proc = 0;
        found = 1;
      }
      release(&p->lock);
    }
    if(!found){
      // Announce idleness, then look once more: a process made RUNNABLE
      // before c->idle was visible was not followed by an IPI to us.
      // Interrupts are off, so none is lost between the scan and wfi: a
      // pending one (an IPI too) ends wfi and is taken by intr_on() above.
      DATA_RACE_NEXT_LINE("idle handshake: ipi_flush() reads it after a fence; see above");
      c->idle = 1;
      __sync_synchronize();
      if(!anyrunnable()){
        timer_idle();
        wfi();
      }
      DATA_RACE_NEXT_LINE("idle handshake: a stale 1 costs ipi_flush() one spare IPI");
      c->idle = 0;
    }
  }
}

// Switch to the scheduler. The caller holds only p->lock and has already
// changed p->state. intena belongs to this kernel thread, not the hart, so
// save and restore it across the switch.
void
sched(void)
{
  int intena;
  struct proc *p = myproc();

  if(p != mycpu()->proc)      // myproc() reads the stack; the hart agrees
    panic("sched: myproc %p is not the hart's %p", p, mycpu()->proc);
  if(!holding(&p->lock))
    panic("sched: p->lock not held");
  if(mycpu()->noff != 1)
    panic("sched: locks held (noff %d)", mycpu()->noff);
  if(p->state == RUNNING)
    panic("sched: running");
  if(intr_get())
    panic("sched: interruptible");

  intena = mycpu()->intena;
  swtch(&p->context, &mycpu()->context);
  mycpu()->intena = intena;
}

// Give up the CPU for one scheduling round.
void
yield(void)
{
  struct proc *p = myproc();

  acquire(&p->lock);
  p->state = RUNNABLE;
  sched();
  release(&p->lock);
}

// A new process's first scheduling lands here, still holding p->lock from
// scheduler(). The very first process finishes booting: it may sleep,
// which main() cannot.
void
forkret(void)
{
  static int first = 1;

  release(&myproc()->lock);
  if(first){
    first = 0;
    start_init();
  }
  usertrapret();
}

// Atomically release lk and sleep on chan; re-acquire lk when woken.
// Callers loop on their condition and check killed() where a kill should
// end the wait.
void
sleep(void *chan, struct spinlock *lk)
{
  struct proc *p = myproc();

  // with p->lock held no wakeup() can slip in between releasing lk and
  // sleeping, since wakeup() takes p->lock. SLEEPING is set before lk is
  // released, so a waker holding lk sees it even without p->lock (wakeup()
  // looks at each slot unlocked first)
  acquire(&p->lock);
  p->chan = chan;
  p->state = SLEEPING;
  release(lk);

  sched();
  p->chan = 0;

  release(&p->lock);
  acquire(lk);
}

// Make the processes sleeping on chan RUNNABLE, only the first in the table
// if one, and wake idle harts for them. Returns how many it woke.
static int
wakesleepers(void *chan, int one)
{
  struct proc *p;
  struct proc *me = myproc();
  int woke = 0;

  for(p = proc; p < &proc[NPROC] && !(one && woke); p++){
    // skip slots not sleeping on chan without taking their lock (a scan
    // of the table costs ~60 acquires): a sleeper on chan set SLEEPING
    // before releasing the lock our caller holds (sleep())
    DATA_RACE_NEXT_LINE("a hint only: checked again under p->lock; see the comment above");
    if(p == me || p->state != SLEEPING || p->chan != chan)
      continue;
    acquire(&p->lock);
    if(p->state == SLEEPING && p->chan == chan){
      p->state = RUNNABLE;
      woke++;
    }
    release(&p->lock);
  }
  if(woke)
    ipi_wake_idle(woke);
  return woke;
}

// Wake every process sleeping on chan. Caller must not hold any p->lock.
void
wakeup(void *chan)
{
  wakesleepers(chan, 0);
}

// Wake one process sleeping on chan (the first in the table), for a queue
// where any sleeper can take the work and the others would only go back to
// sleep (on several harts each such wake-up is a hart woken for nothing).
// The woken process must take the work or pass the wake-up on. Returns 1
// if it woke one. Caller must not hold any p->lock.
int
wakeone(void *chan)
{
  return wakesleepers(chan, 1);
}

// Mark p killed and end any sleep so it notices. Caller holds p->lock.
static void
killlocked(struct proc *p)
{
  p->killed = 1;
  if(p->state == SLEEPING)
    p->state = RUNNABLE;
}

// Kill process pid: it exits the next time it crosses the user/kernel
// boundary or checks killed() in a sleep loop. init cannot be killed.
// Returns 0, or -1 if there is no such process.
int
kill(int pid)
{
  struct proc *p;

  if(pid <= 0 || (initproc && pid == initproc->pid))
    return -1;
  for(p = proc; p < &proc[NPROC]; p++){
    acquire(&p->lock);
    if(p->pid == pid && p->state != UNUSED && p->state != ZOMBIE){
      killlocked(p);
      release(&p->lock);
      ipi_wake_idle(1);
      return 0;
    }
    release(&p->lock);
  }
  return -1;
}

// Console ^C: kill every live process except init and those that asked to
// be spared (ignintr()).
void
killintr(void)
{
  struct proc *p;

  for(p = proc; p < &proc[NPROC]; p++){
    acquire(&p->lock);
    if(p != initproc && !p->ignintr &&
       (p->state == SLEEPING || p->state == RUNNABLE || p->state == RUNNING))
      killlocked(p);
    release(&p->lock);
  }
  ipi_wake_idle(1);
}

void
setkilled(struct proc *p)
{
  acquire(&p->lock);
  p->killed = 1;
  release(&p->lock);
}

// Has p been killed? A plain load: while p lives the flag only goes 0 -> 1
// (setkilled), and the lock would not make a racing kill arrive sooner.
// Twice per system call, so worth the lock it saves.
int
killed(struct proc *p)
{
  DATA_RACE_NEXT_LINE("a flag that only goes 0 -> 1 while p lives: a kill racing with the read is seen at the next check");
  return __atomic_load_n(&p->killed, __ATOMIC_ACQUIRE);
}

// Copy to a user address (user_dst) or a kernel address.
// Returns 0 on success, -1 on a bad user address.
int
either_copyout(int user_dst, uint64 dst, void *src, uint64 len)
{
  struct proc *p = myproc();

  if(user_dst)
    return copyout(p->pagetable, dst, src, len);
  memmove((char *)dst, src, len);
  return 0;
}

// Copy from a user address (user_src) or a kernel address.
// Returns 0 on success, -1 on a bad user address.
int
either_copyin(void *dst, int user_src, uint64 src, uint64 len)
{
  struct proc *p = myproc();

  if(user_src)
    return copyin(p->pagetable, dst, src, len);
  memmove(dst, (char*)src, len);
  return 0;
}

static char *statename[] = {
  [UNUSED]    "unused",
  [USED]      "used",
  [SLEEPING]  "sleep",
  [RUNNABLE]  "runble",
  [RUNNING]   "run",
  [ZOMBIE]    "zombie",
};

// Print the process table (console ^P). Takes no locks, so that it works
// even when the system is stuck.
void
procdump(void)
{
  struct proc *p;

  printf("\n");
  for(p = proc; p < &proc[NPROC]; p++){
    if(p->state == UNUSED)
      continue;
    printf("%d %s %s%s sz=%ld hart=%d\n", p->pid, statename[p->state], p->name,
           p->killed ? " (killed)" : "", p->sz, p->cpu);
  }
}

// Copy up to n rows of the process table (struct procinfo) to user
// address addr. Returns the number of rows, or -1 if addr is bad.
int
procinfo(uint64 addr, int n)
{
  struct proc *p;
  struct procinfo pi;
  int count = 0;

  for(p = proc; p < &proc[NPROC] && count < n; p++){
    acquire(&wait_lock);
    acquire(&p->lock);
    if(p->state == UNUSED){
      release(&p->lock);
      release(&wait_lock);
      continue;
    }
    memset(&pi, 0, sizeof(pi));
    pi.pid = p->pid;
    pi.ppid = p->parent ? p->parent->pid : 0;
    pi.state = p->state;
    pi.killed = p->killed;
    pi.sz = p->sz;
    pi.cputicks = p->cputicks;
    pi.cpu = p->cpu;
    safestrcpy(pi.name, p->name, sizeof(pi.name));
    release(&p->lock);
    release(&wait_lock);
    if(copyout(myproc()->pagetable, addr + count * sizeof(pi),
               (char*)&pi, sizeof(pi)) < 0)
      return -1;
    count++;
  }
  return count;
}
