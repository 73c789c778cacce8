// riscv.h: the RISC-V registers, CSRs and page-table formats the kernel uses.
// Only S-mode state appears here: the kernel has no M-mode code.

#ifndef __ASSEMBLER__

// general registers
static inline uint64
r_tp(void)
{
  uint64 x;
  asm volatile("mv %0, tp" : "=r" (x));
  return x;
}

static inline void
w_tp(uint64 x)
{
  asm volatile("mv tp, %0" : : "r" (x));
}

static inline uint64
r_sp(void)
{
  uint64 x;
  asm volatile("mv %0, sp" : "=r" (x));
  return x;
}

static inline uint64
r_fp(void)
{
  uint64 x;
  asm volatile("mv %0, s0" : "=r" (x));
  return x;
}

// CSR access; the name must be a literal CSR name
#define CSR_READ(name) ({ uint64 __x; \
  asm volatile("csrr %0, " #name : "=r" (__x)); __x; })
#define CSR_WRITE(name, v) \
  asm volatile("csrw " #name ", %0" : : "r" ((uint64)(v)))
#define CSR_SET(name, v) \
  asm volatile("csrs " #name ", %0" : : "r" ((uint64)(v)))
#define CSR_CLEAR(name, v) \
  asm volatile("csrc " #name ", %0" : : "r" ((uint64)(v)))
// clear bits and return the old value, in one instruction
#define CSR_READ_CLEAR(name, v) ({ uint64 __x; \
  asm volatile("csrrc %0, " #name ", %1" : "=r" (__x) : "r" ((uint64)(v))); __x; })

// sstatus
#define SSTATUS_SPP  (1L << 8)  // previous mode: 1 = S, 0 = U
#define SSTATUS_SPIE (1L << 5)  // S interrupts enabled before the trap
#define SSTATUS_SIE  (1L << 1)  // S interrupts enabled
#define SSTATUS_SUM  (1L << 18) // S may touch U pages (we never set it)

static inline uint64 r_sstatus(void) { return CSR_READ(sstatus); }
static inline void w_sstatus(uint64 x) { CSR_WRITE(sstatus, x); }

// sie / sip: supervisor interrupt enable and pending
#define SIE_SSIE (1L << 1)      // software
#define SIE_STIE (1L << 5)      // timer
#define SIE_SEIE (1L << 9)      // external (PLIC)

static inline uint64 r_sie(void) { return CSR_READ(sie); }
static inline void w_sie(uint64 x) { CSR_WRITE(sie, x); }
static inline uint64 r_sip(void) { return CSR_READ(sip); }

// scause values
#define SCAUSE_INTR         (1UL << 63)
#define SCAUSE_S_SOFT       (SCAUSE_INTR | 1)
#define SCAUSE_S_TIMER      (SCAUSE_INTR | 5)
#define SCAUSE_S_EXTERNAL   (SCAUSE_INTR | 9)
#define SCAUSE_ECALL_U      8
#define SCAUSE_LOAD_PAGE    13
#define SCAUSE_STORE_PAGE   15

static inline uint64 r_scause(void) { return CSR_READ(scause); }
static inline uint64 r_sepc(void) { return CSR_READ(sepc); }
static inline void w_sepc(uint64 x) { CSR_WRITE(sepc, x); }
static inline uint64 r_stval(void) { return CSR_READ(stval); }
static inline uint64 r_stvec(void) { return CSR_READ(stvec); }
static inline void w_stvec(uint64 x) { CSR_WRITE(stvec, x); }
static inline uint64 r_satp(void) { return CSR_READ(satp); }
static inline void w_satp(uint64 x) { CSR_WRITE(satp, x); }
static inline void w_sscratch(uint64 x) { CSR_WRITE(sscratch, x); }

// the time CSR; Unicorn has none, so the harness emulates this instruction
// (a trap per read: use it for timestamps, not in hot loops)
static inline uint64
r_time(void)
{
  uint64 x;
  asm volatile("rdtime %0" : "=r" (x));
  return x;
}

// interrupts on/off for this hart
static inline void intr_on(void) { CSR_SET(sstatus, SSTATUS_SIE); }
static inline void intr_off(void) { CSR_CLEAR(sstatus, SSTATUS_SIE); }

static inline int
intr_get(void)
{
  return (r_sstatus() & SSTATUS_SIE) != 0;
}

// flush the whole TLB
static inline void
sfence_vma(void)
{
  asm volatile("sfence.vma zero, zero");
}

static inline void
wfi(void)
{
  asm volatile("wfi");
}

// make this hart's instruction fetches see every store made so far (by any
// hart, once that hart's stores are visible: fence first)
static inline void
fence_i(void)
{
  asm volatile("fence.i" ::: "memory");
}

// Zihintpause: "I am spinning". The harness gives the rest of this hart's
// slice to another hart when it sees one (harness/machine/cpus.py).
static inline void
cpu_pause(void)
{
  asm volatile(".4byte 0x0100000f");
}

typedef uint64 pte_t;
typedef uint64 *pagetable_t;   // 512 PTEs

#endif // __ASSEMBLER__

#define PGSIZE  4096
#define PGSHIFT 12

#define PGROUNDUP(sz)   (((sz) + PGSIZE - 1) & ~(PGSIZE - 1))
#define PGROUNDDOWN(a)  (((a)) & ~(PGSIZE - 1))

// Sv39 satp
#define SATP_SV39       (8L << 60)
#define MAKE_SATP(pt)   (SATP_SV39 | (((uint64)(pt)) >> 12))

// page table entries
#define PTE_V (1L << 0)
#define PTE_R (1L << 1)
#define PTE_W (1L << 2)
#define PTE_X (1L << 3)
#define PTE_U (1L << 4)
#define PTE_A (1L << 6)
#define PTE_D (1L << 7)
// software (the MMU ignores every other bit of a PTE without PTE_V): a
// user page reserved, to be allocated on first touch (vm.c, uvmlazy)
#define PTE_LAZY (1L << 8)

#define PA2PTE(pa)      ((((uint64)(pa)) >> 12) << 10)
#define PTE2PA(pte)     (((pte) >> 10) << 12)
#define PTE_FLAGS(pte)  ((pte) & 0x3FF)
#define PTE_LEAF(pte)   (((pte) & (PTE_R | PTE_W | PTE_X)) != 0)

// the 9-bit page-table index of va at level (0 = leaf level)
#define PXSHIFT(level)  (PGSHIFT + 9 * (level))
#define PX(level, va)   ((((uint64)(va)) >> PXSHIFT(level)) & 0x1FF)
#define MEGAPAGE        (1L << PXSHIFT(1))   // 2 MiB
