// ukva.c: U-mode code at the virtual address of S-mode code, other bytes there.
// twin() is alone in its page of the stub's text: four 32-bit addi and a ret (5
// instructions in 20 bytes). S-mode calls it with paging off, then maps that page, for
// U-mode only, onto upage, which holds eight 16-bit c.addi and an ecall (9 instructions
// in the same 20 bytes), and srets to it. The ecall's trap checks a0 (eight added).
// The harness's instruction counter (tests/test_det_count.py) must count 9 there, not
// the 5 of the S-mode block at the same address and of the same length.
#include "stub.h"

#define PTE_V (1 << 0)
#define PTE_R (1 << 1)
#define PTE_W (1 << 2)
#define PTE_X (1 << 3)
#define PTE_U (1 << 4)
#define PTE_A (1 << 6)
#define PTE_D (1 << 7)
#define PA2PTE(pa) ((((uint64)(pa)) >> 12) << 10)
#define MEGA (1UL << 21)

static uint64 root[512] __attribute__((aligned(4096)));
static uint64 l1k[512] __attribute__((aligned(4096)));
static uint64 l0k[512] __attribute__((aligned(4096)));
static uint64 l1[512] __attribute__((aligned(4096)));
static uint64 l0[512] __attribute__((aligned(4096)));
static char upage[4096] __attribute__((aligned(4096)));

asm(".section .text.twin, \"ax\"\n"
    ".balign 4096\n"
    ".globl twin\n"
    "twin:\n"
    ".option push\n"
    ".option norvc\n"
    "  addi a0, a0, 1\n"
    "  addi a0, a0, 1\n"
    "  addi a0, a0, 1\n"
    "  addi a0, a0, 1\n"
    "  ret\n"
    ".option pop\n"
    ".balign 4096\n"
    ".text\n"
    ".globl utwin, utwin_end\n"
    "utwin:\n"
    ".option push\n"
    ".option rvc\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    "  c.addi a0, 1\n"
    ".option norvc\n"
    "  ecall\n"
    ".option pop\n"
    "utwin_end:\n");
extern char twin[], utwin[], utwin_end[];

void
trap(struct frame *f)
{
  uint64 scause = csrr(scause), sepc = csrr(sepc);
  if(scause != 8 || sepc != (uint64)twin + 16 || f->x[10] != 8){
    puts("BAD trap ");
    puthex(scause);
    puts(" at ");
    puthex(sepc);
    puts(" a0 ");
    puthex(f->x[10]);
    putc('\n');
    power(POWER_FAIL, 5);
  }
  puts("ukva ok\n");
  power(POWER_PASS, 0);
}

int
main(void)
{
  uint64 (*k)(uint64) = (uint64 (*)(uint64))twin;
  if(k(5) != 9 || k(0) != 4)   // the S-mode bytes, paging off
    return 3;
  for(char *s = utwin, *d = upage; s < utwin_end; )
    *d++ = *s++;
  asm volatile("fence.i");

  // S-mode: RAM by 2 MiB pages, the first 2 MiB by 4 KiB pages (R/W/X), except twin's
  // page, which is upage for U-mode; the UART and the power device below RAM
  for(uint64 i = 0; i < 512; i++)
    l0k[i] = PA2PTE(KERNBASE + i * 4096) | PTE_V | PTE_R | PTE_W | PTE_X | PTE_A | PTE_D;
  l0k[((uint64)twin >> 12) & 511] = PA2PTE(upage) | PTE_V | PTE_R | PTE_X | PTE_U | PTE_A;
  l1k[0] = PA2PTE(l0k) | PTE_V;
  for(uint64 i = 1; i < 512; i++)
    l1k[i] = PA2PTE(KERNBASE + i * MEGA) | PTE_V | PTE_R | PTE_W | PTE_X | PTE_A | PTE_D;
  root[2] = PA2PTE(l1k) | PTE_V;
  root[0] = PA2PTE(l1) | PTE_V;
  l1[0] = PA2PTE(l0) | PTE_V;
  l1[UART0 >> 21] = PA2PTE(UART0) | PTE_V | PTE_R | PTE_W | PTE_A | PTE_D;
  l0[POWER >> 12] = PA2PTE(POWER) | PTE_V | PTE_R | PTE_W | PTE_A | PTE_D;
  csrw(satp, (8UL << 60) | ((uint64)root >> 12));
  asm volatile("sfence.vma zero, zero");

  csrw(stvec, trapvec);
  csrc(sstatus, SSTATUS_SPP);
  csrw(sepc, twin);
  asm volatile("li a0, 0\n sret" ::: "a0");
  return 1;
}
