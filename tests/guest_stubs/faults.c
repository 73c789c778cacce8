// faults.c: guest mistakes the machine must stop with a clear error.
// bootinfo.cmd picks one.
#include "stub.h"
#include "bootinfo.h"

static int
is(const char *a, const char *b)
{
  while(*a && *a == *b)
    a++, b++;
  return *a == *b;
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  const char *c = bi->cmd;

  puts("fault: ");
  puts(c);
  putc('\n');
  if(is(c, "uart-offset"))
    return R8(UART0 + 8);
  if(is(c, "uart-width"))
    return R32(UART0);
  if(is(c, "unmapped"))
    return R32(0x30000000);
  if(is(c, "plic-context0"))
    R32(PLIC + 0x2000) = 1;
  if(is(c, "virtio-notify"))
    *(volatile uint32 *)(VIRTIO0 + 0x50) = 0;
  if(is(c, "ecall"))
    asm volatile("ecall");
  if(is(c, "rom"))
    *(volatile uint32 *)BOOTINFO = 0;
  if(is(c, "power"))
    R32(POWER) = 0x1234;
  if(is(c, "no-stvec"))
    asm volatile(".word 0");
  if(is(c, "reset"))
    R32(POWER) = POWER_RESET;
  if(is(c, "spin"))
    for(;;)
      ;
  puts("no fault happened\n");
  return 1;
}
