// vmlayout.h: the virtual address spaces (Sv39).
//
// Kernel page table:
//   0x00001000   BOOTINFO page (read-only)
//   0x00100000   POWER
//   0x02000000   CLINT
//   0x0C000000   PLIC
//   0x10000000   UART0, VIRTIO0, VIRTIO1
//   0x80000000   RAM, identity-mapped up to PHYSTOP: kernel text R-X,
//                everything after it RW- (2 MiB pages where aligned)
//   ...
//   KSTACK(i)    per-process kernel stacks, each below an unmapped guard page
//   TRAPFRAME    (not mapped in the kernel table)
//   TRAMPOLINE   trampoline.S's page, R-X
//
// User page table:
//   0            text, data, bss (from the ELF)
//                guard page (mapped without PTE_U)
//                stack, USERSTACK pages; sp starts at its top (all but
//                the top USERSTACKNOW are allocated when first touched)
//                heap, grown by sbrk
//   ...
//   TRAPFRAME    struct trapframe, RW- (no PTE_U)
//   TRAMPOLINE   the same trampoline page, R-X (no PTE_U)

// one beyond the highest virtual address; Sv39 allows 39 bits but we stay
// below bit 38 so no address needs sign extension
#define MAXVA       (1L << (9 + 9 + 9 + 12 - 1))

#define TRAMPOLINE  (MAXVA - PGSIZE)
#define TRAPFRAME   (TRAMPOLINE - PGSIZE)

// kernel stack of process slot p: KSTACKPAGES pages, with an unmapped guard
// page below each so an overflow faults instead of corrupting memory
#define KSTACKSIZE  (KSTACKPAGES * PGSIZE)
#define KSTACK(p)   (TRAMPOLINE - ((p) + 1) * (KSTACKSIZE + PGSIZE))
// the slot whose kernel stack holds address sp, from its bottom to its top
// (NPROC or more for an address outside every stack): KSTACK's inverse
#define KSTACK_SLOT(sp) ((TRAMPOLINE - 1 - (sp)) / (KSTACKSIZE + PGSIZE))
