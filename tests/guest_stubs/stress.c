// stress.c: work that must give the same answer however often the harness stops and
// resumes the hart: ALU/load/store mixing, trap deliveries (an illegal instruction
// every 8 rounds, counted by trap()), and polled UART input (LSR then RHR) hashed in
// order. A repeated or lost instruction, trap or MMIO access changes the output.
// bootinfo.cmd: the number of input bytes to expect.
#include "stub.h"
#include "bootinfo.h"

static uint64 arr[64];
static volatile uint64 traps;

void
trap(struct frame *f)
{
  uint64 sepc = csrr(sepc);
  if(csrr(scause) != 2)
    power(POWER_FAIL, 6);
  traps++;
  csrw(sepc, sepc + 4);
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  uint64 x = 1, acc = 0, want = 0, h = 0, n = 0;

  for(const char *p = bi->cmd; *p; p++)
    want = want * 10 + (*p - '0');
  csrw(stvec, trapvec);
  for(uint64 i = 0; i < 300000; i++){
    x = x * 6364136223846793005UL + i;
    arr[i % 64] += x >> 17;
    acc ^= arr[(i * 7) % 64] + i;
    if((i & 7) == 0)
      asm volatile(".word 0");     // illegal: delivered, counted, skipped
    if(n < want && (R8(UART0 + 5) & 1)){
      h = h * 31 + R8(UART0);
      n++;
    }
  }
  while(n < want){
    if(R8(UART0 + 5) & 1){
      h = h * 31 + R8(UART0);
      n++;
    }
  }
  puts("acc ");
  puthex(acc);
  puts(" traps ");
  putdec(traps);
  puts(" input ");
  putdec(n);
  puts(" hash ");
  puthex(h);
  putc('\n');
  return 0;
}
