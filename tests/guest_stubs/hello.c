// hello.c: UART output, bootinfo and the exit status.
#include "stub.h"
#include "bootinfo.h"

int
main(uint64 hartid, struct bootinfo *bi)
{
  puts("hello from the stub\n");
  if(hartid != 0 || bi->magic != BOOTINFO_MAGIC || bi->ram_base != KERNBASE)
    return 1;
  puts("ram ");
  putdec(bi->ram_size >> 20);
  puts(" MiB, cmd '");
  puts(bi->cmd);
  puts("'\n");
  return 7;
}
