// panic.c: a kernel-style panic for the fault report. "plain": main -> f1 -> f2 ->
// panic(). "trap": an illegal instruction in g2, taken through kvec, which builds
// the frame record our kernel's kernelvec builds (fp-8 = sepc, fp-16 =
// interrupted s0), so the backtrace crosses the trap: panic <- ktrap <- kvec <- g2
// <- g1 <- main.
#include "stub.h"
#include "bootinfo.h"

void __attribute__((noinline))
panic(const char *msg)
{
  puts("panic: ");
  puts(msg);
  putc('\n');
  R32(POWER) = POWER_FAIL | (1 << 16);
  for(;;)
    ;
}

void __attribute__((noinline))
f2(int x)
{
  if(x > 0)
    panic("stub test");
}

void __attribute__((noinline))
f1(int x)
{
  f2(x + 1);
  putc('.');
}

void
ktrap(void)
{
  panic("unexpected scause in ktrap");
}

// like kernel_c/kernelvec.S: save ra, build the frame record, call ktrap
asm(".align 4\n"
    ".globl kvec\n"
    "kvec:\n"
    "  addi sp, sp, -32\n"
    "  sd ra, 0(sp)\n"
    "  sd s0, 16(sp)\n"
    "  csrr t0, sepc\n"
    "  sd t0, 24(sp)\n"
    "  addi s0, sp, 32\n"
    "  call ktrap\n");
void kvec(void);

void __attribute__((noinline))
g2(int x)
{
  if(x)
    asm volatile(".word 0x00000000");  // illegal
  putc('.');
}

void __attribute__((noinline))
g1(int x)
{
  g2(x);
  putc('.');
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  if(bi->cmd[0] == 't'){
    csrw(stvec, kvec);
    g1(1);
  }
  f1(1);
  return 0;
}
