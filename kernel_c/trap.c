// trap.c: traps from user space (usertrap), from the kernel (kerneltrap),
// and device interrupt dispatch (devintr).
//
// How traps arrive under the harness (docs/ARCHITECTURE.md, "Traps"):
// interrupts are taken natively through stvec; synchronous exceptions
// (ecall, page faults, illegal instructions) are delivered by the harness,
// which sets scause/sepc/stval/sstatus exactly as hardware would and jumps
// to stvec. So this file looks like it would on real hardware.
//
// While a process runs in U-mode, stvec is trampoline.S's uservec; while
// the kernel runs, it is kernelvec.S's kernelvec.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "vmlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"

extern char trampoline[], uservec[], userret[];
void kernelvec(void);

// a handler per PLIC source (irq_register)
static void (*irqhandler[32])(void);

void
trapinit(void)
{
}

// Take traps in the kernel, and accept timer and device interrupts.
void
trapinithart(void)
{
  w_stvec((uint64)kernelvec);
  w_sie(r_sie() | SIE_SEIE | SIE_STIE | SIE_SSIE);
}

// Route PLIC source irq to fn (called from the device's init).
void
irq_register(int irq, void (*fn)(void))
{
  if(irq <= 0 || irq >= NELEM(irqhandler))
    panic("irq_register: bad irq %d", irq);
  irqhandler[irq] = fn;
}

// A readable name for an exception cause, for fault messages.
char*
causename(uint64 scause)
{
  static char *names[] = {
    [0] "instruction misaligned",  [1] "instruction access fault",
    [2] "illegal instruction",     [3] "breakpoint",
    [4] "load misaligned",         [5] "load access fault",
    [6] "store misaligned",        [7] "store access fault",
    [8] "ecall from U",            [9] "ecall from S",
    [12] "instruction page fault", [13] "load page fault",
    [15] "store page fault",
  };

  if(scause & SCAUSE_INTR)
    return "interrupt";
  if(scause < NELEM(names) && names[scause])
    return names[scause];
  return "unknown";
}

// A trap from user space, reached from uservec with the kernel page table
// and this process's kernel stack.
void
usertrap(void)
{
  int which_dev = 0, fault = -1;
  uint64 scause = r_scause();
  struct proc *p;

  if((r_sstatus() & SSTATUS_SPP) != 0)
    panic("usertrap: not from user mode");

  // traps from here on go to kerneltrap()
  w_stvec((uint64)kernelvec);

  p = myproc();
  p->trapframe->epc = r_sepc();

  if(scause == SCAUSE_ECALL_U){
    if(killed(p))
      exit(-1);
    // return past the ecall
    p->trapframe->epc += 4;
    // sepc, scause and sstatus are saved: interrupts may come in now
    intr_on();
    syscall();
  } else if((scause == SCAUSE_LOAD_PAGE || scause == SCAUSE_STORE_PAGE) &&
            (fault = uvmfault(p->pagetable, r_stval())) == 0){
    // the first touch of a reserved stack page (vm.c, uvmlazy): run the
    // instruction again
  } else if(fault == -2){
    // a reserved stack page, but no memory to give it: say so, not just
    // "unexpected scause", and kill the process
    printf("usertrap(): out of memory for a stack page pid=%d %s\n"
           "            sepc=0x%lx stval=0x%lx\n",
           p->pid, p->name, r_sepc(), r_stval());
    setkilled(p);
  } else if((which_dev = devintr(scause)) != 0){
    // handled
  } else {
    // the process did something wrong: kill it, not the kernel
    printf("usertrap(): unexpected scause 0x%lx (%s) pid=%d %s\n"
           "            sepc=0x%lx stval=0x%lx\n",
           scause, causename(scause), p->pid, p->name, r_sepc(), r_stval());
    setkilled(p);
  }

  if(killed(p))
    exit(-1);

  // a timer interrupt: give up the CPU
  if(which_dev == 2)
    yield();

  usertrapret();
}

// Return to user space through trampoline.S's userret.
void
usertrapret(void)
{
  struct proc *p = myproc();
  uint64 x, satp;
  uint64 trampoline_userret;

  // stvec is about to point at uservec, which only works in U-mode: no
  // interrupts until we get there. One csrrc turns them off and reads
  // sstatus for the sret below (CSR instructions are dear: see myproc())
  x = CSR_READ_CLEAR(sstatus, SSTATUS_SIE) & ~SSTATUS_SIE;
  w_stvec(TRAMPOLINE + (uservec - trampoline));

  // what uservec needs on the next trap
  p->trapframe->kernel_satp = MAKE_SATP(kernel_pagetable);   // no CSR read: see myproc()
  p->trapframe->kernel_sp = p->kstack + KSTACKSIZE;
  p->trapframe->kernel_trap = (uint64)usertrap;
  p->trapframe->kernel_hartid = r_tp();

  // sret goes to U-mode with interrupts enabled: the trap from U-mode
  // left sstatus so, unless this hart took other traps since
  if((x & (SSTATUS_SPP | SSTATUS_SPIE)) != SSTATUS_SPIE)
    w_sstatus((x & ~SSTATUS_SPP) | SSTATUS_SPIE);
  w_sepc(p->trapframe->epc);

  satp = MAKE_SATP(p->pagetable);
  tlb_enter(satp);   // sfence.vma only if a translation may be stale
  trampoline_userret = TRAMPOLINE + (userret - trampoline);
  ((void (*)(uint64))trampoline_userret)(satp);
}

// A trap taken in S-mode, through kernelvec, on the current kernel stack.
// Only interrupts are expected; any exception here is a kernel bug.
void
kerneltrap(void)
{
  int which_dev;
  uint64 sepc = r_sepc();
  uint64 sstatus = r_sstatus();
  uint64 scause = r_scause();
  struct proc *p;

  if((sstatus & SSTATUS_SPP) == 0)
    panic("kerneltrap: not from supervisor mode");
  if(intr_get() != 0)
    panic("kerneltrap: interrupts enabled");

  if((which_dev = devintr(scause)) == 0)
    panic("kerneltrap: unexpected scause 0x%lx (%s) sepc=0x%lx stval=0x%lx",
          scause, causename(scause), sepc, r_stval());

  // a timer interrupt while a process runs in the kernel: preempt it
  p = myproc();
  if(which_dev == 2 && p != 0 && p->state == RUNNING)
    yield();

  // yield() may have taken other traps: restore ours for kernelvec's sret
  w_sepc(sepc);
  w_sstatus(sstatus);
}

// kernelvec found that the trap's frame would land in a kernel stack's
// guard page: the stack overflowed. Runs on a spare stack; never returns.
void
kstackoverflow(uint64 sp)
{
  panic("kerneltrap: kernel stack overflow: sp=0x%lx scause 0x%lx (%s) "
        "sepc=0x%lx stval=0x%lx", sp, r_scause(), causename(r_scause()),
        r_sepc(), r_stval());
}

// Handle an interrupt. Returns 2 for the timer, 1 for another known
// interrupt, 0 if scause is not an interrupt we know.
int
devintr(uint64 scause)
{
  int irq;
  struct proc *p;

  if(scause == SCAUSE_S_EXTERNAL){
    irq = plic_claim();
    if(irq > 0 && irq < NELEM(irqhandler) && irqhandler[irq])
      irqhandler[irq]();
    else if(irq)
      printf("devintr: unexpected irq %d\n", irq);
    if(irq)
      plic_complete(irq);
    return 1;
  }
  if(scause == SCAUSE_S_TIMER){
    p = myproc();
    if(p)
      p->cputicks++;
    timerintr();
    return 2;
  }
  if(scause == SCAUSE_S_SOFT){
    ipi_intr();   // another hart's request (ipi.c)
    return 1;
  }
  return 0;
}
