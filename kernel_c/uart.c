// uart.c: driver for the 16550-style UART at UART0 (harness/devices/uart.py).
//
// Output is polled: the emulated transmitter is always ready, so a byte
// costs two MMIO accesses and no interrupt. Input is interrupt-driven:
// IER's receive bit makes the UART raise UART0_IRQ through the PLIC when a
// byte arrives, and uartintr() hands every waiting byte to the console.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "defs.h"

#define Reg(reg) ((volatile uchar *)(UART0 + (reg)))

// registers (byte offsets) and the bits we use
#define RHR 0                   // receive holding register (read)
#define THR 0                   // transmit holding register (write)
#define IER 1                   // interrupt enable
#define IER_RX_ENABLE  (1 << 0)
#define FCR 2                   // FIFO control (write)
#define FCR_FIFO_ENABLE (1 << 0)
#define FCR_FIFO_CLEAR  (3 << 1) // clear both FIFOs
#define ISR 2                   // interrupt status (read)
#define LCR 3                   // line control
#define LCR_EIGHT_BITS (3 << 0)
#define LSR 5                   // line status
#define LSR_RX_READY   (1 << 0) // a byte waits in RHR
#define LSR_TX_IDLE    (1 << 5) // THR can take a byte

#define ReadReg(reg) (*(Reg(reg)))
#define WriteReg(reg, v) (*(Reg(reg)) = (v))

void
uartinit(void)
{
  WriteReg(IER, 0x00);
  WriteReg(LCR, LCR_EIGHT_BITS);
  WriteReg(FCR, FCR_FIFO_ENABLE | FCR_FIFO_CLEAR);
  WriteReg(IER, IER_RX_ENABLE);
}

// Send one byte, waiting for the transmitter. Safe from any context
// (printf, panic, interrupt handlers): it takes no lock and never sleeps.
void
uartputc_sync(int c)
{
  while((ReadReg(LSR) & LSR_TX_IDLE) == 0)
    ;
  WriteReg(THR, c);
}

// One received byte, or -1 if none is waiting.
int
uartgetc(void)
{
  if(ReadReg(LSR) & LSR_RX_READY)
    return ReadReg(RHR);
  return -1;
}

// The UART interrupted (input arrived): pass every waiting byte on.
void
uartintr(void)
{
  int c;

  while((c = uartgetc()) >= 0)
    consoleintr(c);
}
