// uart_rx.c: console input through the PLIC. Each received byte raises UART0_IRQ;
// the handler claims it, drains the UART and completes it. The stub echoes the
// input in upper case until it sees '.', then prints how many claims it made.
#include "stub.h"
#include "bootinfo.h"

static char got[256];
static volatile int ngot;
static volatile int claims;

void
trap(struct frame *f)
{
  uint64 scause = csrr(scause);
  int irq;

  if(scause != ((1UL << 63) | 9)){
    puts("unexpected trap ");
    puthex(scause);
    putc('\n');
    power(POWER_FAIL, 2);
  }
  irq = R32(PLIC_SCLAIM);
  if(irq == UART0_IRQ){
    while(R8(UART0 + 5) & 1)          // LSR.DR
      if(ngot < sizeof(got))
        got[ngot++] = R8(UART0);
  } else if(irq != 0){
    puts("unexpected irq\n");
    power(POWER_FAIL, 3);
  }
  R32(PLIC_SCLAIM) = irq;
  claims++;
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  csrw(stvec, trapvec);
  if(bi->cmd[0] == 's')           // "stip": an expired deadline, but STIE stays masked
    R64(CLINT_MTIMECMP) = 0;
  R32(PLIC_PRIORITY + UART0_IRQ * 4) = 1;
  R32(PLIC_SENABLE) = 1 << UART0_IRQ;
  R32(PLIC_SPRIORITY) = 0;
  R8(UART0 + 1) = 1;                   // IER: receive interrupt
  csrs(sie, SIE_SEIE);
  csrs(sstatus, SSTATUS_SIE);
  puts("ready\n");
  for(int i = 0; ; i++){
    while(i >= ngot)
      asm volatile("wfi");
    char c = got[i];
    putc(c >= 'a' && c <= 'z' ? c - 32 : c);
    if(c == '.')
      break;
  }
  puts("\nclaims>0 ");
  puts(claims > 0 ? "yes\n" : "no\n");
  return 0;
}
