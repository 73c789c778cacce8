// proc.h: processes, per-CPU state and the saved-register layouts.

// callee-saved registers for a kernel context switch (swtch.S)
struct context {
  uint64 ra;
  uint64 sp;
  uint64 s0;
  uint64 s1;
  uint64 s2;
  uint64 s3;
  uint64 s4;
  uint64 s5;
  uint64 s6;
  uint64 s7;
  uint64 s8;
  uint64 s9;
  uint64 s10;
  uint64 s11;
};

// per-CPU state
struct cpu {
  struct proc *proc;          // running process, or 0
  struct context context;     // swtch() here to enter scheduler()
  int noff;                   // depth of push_off() nesting
  int intena;                 // were interrupts enabled before push_off()?
  volatile int idle;          // in the scheduler's wfi: an IPI wakes it (ipi.c)
  volatile uint ipi;          // IPI_* requests for this hart (ipi.c)
  int wakeidle;               // processes made RUNNABLE, to hand to idle harts (ipi.c)
  uint codegen;               // icache.c's codegen at this hart's last fence.i
  uint64 usatp;               // tlb.c: the user satp this hart last entered
  uint64 tlbgen;              // tlb.c's tlbgen at this hart's last sfence.vma
  int started;                // running its scheduler
};

extern struct cpu cpus[NCPU];

// This hart's struct cpu; interrupts must be off so we cannot move. Inline,
// because every acquire/release uses it several times and a call costs the
// emulator a translated-block lookup each way.
static inline struct cpu*
mycpu(void)
{
  return &cpus[r_tp()];
}

// cpu.ipi bits: what an inter-processor interrupt asks for (ipi.c)
#define IPI_WAKE    1

// The page at TRAPFRAME in each user address space. trampoline.S's uservec
// saves the user registers here and loads the kernel_* fields; userret does
// the reverse. The byte offsets are fixed by trampoline.S (TF_* there).
struct trapframe {
  /*   0 */ uint64 kernel_satp;   // kernel page table
  /*   8 */ uint64 kernel_sp;     // top of this process's kernel stack
  /*  16 */ uint64 kernel_trap;   // usertrap()
  /*  24 */ uint64 epc;           // saved user program counter
  /*  32 */ uint64 kernel_hartid; // saved kernel tp
  /*  40 */ uint64 ra;
  /*  48 */ uint64 sp;
  /*  56 */ uint64 gp;
  /*  64 */ uint64 tp;
  /*  72 */ uint64 t0;
  /*  80 */ uint64 t1;
  /*  88 */ uint64 t2;
  /*  96 */ uint64 s0;
  /* 104 */ uint64 s1;
  /* 112 */ uint64 a0;
  /* 120 */ uint64 a1;
  /* 128 */ uint64 a2;
  /* 136 */ uint64 a3;
  /* 144 */ uint64 a4;
  /* 152 */ uint64 a5;
  /* 160 */ uint64 a6;
  /* 168 */ uint64 a7;
  /* 176 */ uint64 s2;
  /* 184 */ uint64 s3;
  /* 192 */ uint64 s4;
  /* 200 */ uint64 s5;
  /* 208 */ uint64 s6;
  /* 216 */ uint64 s7;
  /* 224 */ uint64 s8;
  /* 232 */ uint64 s9;
  /* 240 */ uint64 s10;
  /* 248 */ uint64 s11;
  /* 256 */ uint64 t3;
  /* 264 */ uint64 t4;
  /* 272 */ uint64 t5;
  /* 280 */ uint64 t6;
};

enum procstate {
  UNUSED = PS_UNUSED,
  USED = PS_USED,
  SLEEPING = PS_SLEEPING,
  RUNNABLE = PS_RUNNABLE,
  RUNNING = PS_RUNNING,
  ZOMBIE = PS_ZOMBIE,
};

struct proc {
  struct spinlock lock;

  // p->lock must be held to use these
  enum procstate state;
  void *chan;                   // sleeping on chan, if non-zero
  int killed;                   // kill() was called: exit at the next chance
  int xstate;                   // exit status for the parent's wait()
  int pid;

  // wait_lock must be held to use this
  struct proc *parent;

  // private to the process: no lock needed
  uint64 kstack;                // bottom of the kernel stack (virtual)
  uint64 sz;                    // bytes of user memory
  uint64 heapbase;              // sbrk never shrinks below this (stack top)
  pagetable_t pagetable;        // user page table
  struct trapframe *trapframe;  // the TRAPFRAME page (physical address)
  struct context context;       // swtch() here to run the process
  struct file *ofile[NOFILE];   // open files
  struct inode *cwd;            // current directory
  char name[16];                // for debugging and ps
  int ignintr;                  // console ^C spares this process
  uint64 cputicks;              // timer ticks spent running
  int cpu;                      // hart it runs or last ran on (-1: never ran)
};

// a subsystem's clean-up when a process exits (see exithook_register)
typedef void (*exithook_t)(struct proc *p);
