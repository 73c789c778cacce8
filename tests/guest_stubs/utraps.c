// utraps.c: synchronous traps from U-mode under Sv39, as the harness delivers them.
// The stub maps RAM twice: at 0x80000000 for S-mode and at USER (a U-mode alias)
// for the user code in user_start below. Each user instruction labelled u_* traps;
// trap() checks scause, sepc and stval against the table, advances, and returns.
#include "stub.h"

#define PTE_V (1 << 0)
#define PTE_R (1 << 1)
#define PTE_W (1 << 2)
#define PTE_X (1 << 3)
#define PTE_U (1 << 4)
#define PTE_A (1 << 6)
#define PTE_D (1 << 7)
#define PA2PTE(pa) ((((uint64)(pa)) >> 12) << 10)
#define USER 0x40000000UL
#define U(sym) ((uint64)(sym) - KERNBASE + USER)

static uint64 root[512] __attribute__((aligned(4096)));
static uint64 l1[512] __attribute__((aligned(4096)));
static uint64 l0[512] __attribute__((aligned(4096)));
static char rodata_page[4096] __attribute__((aligned(4096)));
static char rw_page[4096] __attribute__((aligned(4096)));
static char ustack[4096] __attribute__((aligned(16)));

asm(".align 2\n"
    ".globl user_start\n"
    "user_start:\n"
    "  li a7, 1\n"
    "u_ecall: ecall\n"
    "  li a0, 0x3000\n"
    "u_load: ld a1, 0(a0)\n"
    "  li a0, 0x1000\n"
    "u_store: sd a1, 8(a0)\n"
    "  li a0, 0x3000\n"
    "u_csd: c.sd a1, 16(a0)\n"
    "u_clw: c.lw a2, 4(a0)\n"
    "  li a0, 0x1000\n"
    "u_amo: amoadd.w zero, a1, (a0)\n"
    "u_csr: csrr a5, sstatus\n"
    "u_rdtime: rdtime a4\n"
    "u_ebreak: .word 0x00100073\n"
    "u_cebreak: .half 0x9002\n"
    "  li t0, 0x5000\n"
    "u_jalr: jalr t0\n"
    "  li a1, 0x2000\n"
    "  sd a4, 0(a1)\n"
    "  li a7, 99\n"
    "u_exit: ecall\n");
extern char user_start[], u_ecall[], u_load[], u_store[], u_csd[], u_clw[], u_amo[];
extern char u_csr[], u_rdtime[], u_ebreak[], u_cebreak[], u_exit[];

struct expect { uint64 sepc, scause, stval; };
static struct expect want[12];
static int n;

static void
bad(const char *what, uint64 got, uint64 exp)
{
  puts("BAD trap ");
  putdec(n);
  puts(" ");
  puts(what);
  puts(" got ");
  puthex(got);
  puts(" want ");
  puthex(exp);
  putc('\n');
  power(POWER_FAIL, 5);
}

void
trap(struct frame *f)
{
  uint64 sepc = csrr(sepc), scause = csrr(scause), stval = csrr(stval);
  struct expect *w = &want[n];

  if(csrr(sstatus) & SSTATUS_SPP)
    bad("SPP", 1, 0);
  if(scause != w->scause)
    bad("scause", scause, w->scause);
  if(sepc != w->sepc)
    bad("sepc", sepc, w->sepc);
  if(stval != w->stval)
    bad("stval", stval, w->stval);
  puts("trap ");
  putdec(scause);
  puts(" ok\n");
  n++;
  if(sepc == U(u_exit)){
    if(*(uint64 *)rw_page == 0)
      bad("rdtime from U", 0, 1);
    power(POWER_PASS, 0);
  }
  if(sepc == U(u_rdtime) && !(csrr(scounteren) & 2)){
    csrs(scounteren, 2);        // allow rdtime in U and retry it
    return;
  }
  if(scause == 12){
    csrw(sepc, f->x[1]);        // the fetch fault came from jalr: return to ra
    return;
  }
  csrw(sepc, sepc + ((*(uint16 *)sepc & 3) == 3 ? 4 : 2));
}

int
main(void)
{
  struct expect e[] = {
    {U(u_ecall), 8, 0}, {U(u_load), 13, 0x3000}, {U(u_store), 15, 0x1008},
    {U(u_csd), 15, 0x3010}, {U(u_clw), 13, 0x3004}, {U(u_amo), 15, 0x1000},
    {U(u_csr), 2, *(uint32 *)u_csr}, {U(u_rdtime), 2, *(uint32 *)u_rdtime},
    {U(u_ebreak), 3, U(u_ebreak)}, {U(u_cebreak), 3, U(u_cebreak)},
    {0x5000, 12, 0x5000}, {U(u_exit), 8, 0},
  };
  for(int i = 0; i < 12; i++)
    want[i] = e[i];

  root[2] = PA2PTE(KERNBASE) | PTE_V | PTE_R | PTE_W | PTE_X | PTE_A | PTE_D;
  root[1] = PA2PTE(KERNBASE) | PTE_V | PTE_R | PTE_W | PTE_X | PTE_U | PTE_A | PTE_D;
  root[0] = PA2PTE(l1) | PTE_V;
  l1[0] = PA2PTE(l0) | PTE_V;
  l1[UART0 >> 21] = PA2PTE(UART0) | PTE_V | PTE_R | PTE_W | PTE_A | PTE_D;
  l0[POWER >> 12] = PA2PTE(POWER) | PTE_V | PTE_R | PTE_W | PTE_A | PTE_D;
  l0[1] = PA2PTE(rodata_page) | PTE_V | PTE_R | PTE_U | PTE_A | PTE_D;
  l0[2] = PA2PTE(rw_page) | PTE_V | PTE_R | PTE_W | PTE_U | PTE_A | PTE_D;
  csrw(satp, (8UL << 60) | ((uint64)root >> 12));
  asm volatile("sfence.vma zero, zero");

  csrw(stvec, trapvec);
  csrw(scounteren, 0);
  csrs(sstatus, SSTATUS_SUM);
  csrc(sstatus, SSTATUS_SPP);
  csrw(sepc, U(user_start));
  asm volatile("mv sp, %0\n sret" :: "r"(U(ustack + sizeof(ustack))));
  return 1;
}
