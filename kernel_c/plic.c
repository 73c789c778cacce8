// plic.c: the platform-level interrupt controller (harness/devices/plic.py).
//
// Device interrupts (UART0_IRQ, VIRTIO0_IRQ, VIRTIO1_IRQ) arrive as one
// supervisor external interrupt (SEIP). The handler claims the source
// number, services it, and completes it so the PLIC can raise it again.
// Register offsets are QEMU virt's for context 1 (hart 0, S-mode).

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "riscv.h"
#include "defs.h"

#define PLIC_REG(a) (*(volatile uint32*)(a))

void
plicinit(void)
{
  // a non-zero priority enables a source
  PLIC_REG(PLIC_PRIORITY + UART0_IRQ*4) = 1;
  PLIC_REG(PLIC_PRIORITY + VIRTIO0_IRQ*4) = 1;
  PLIC_REG(PLIC_PRIORITY + VIRTIO1_IRQ*4) = 1;
}

void
plicinithart(void)
{
  // route the sources to this hart's S-mode context
  PLIC_REG(PLIC_SENABLE) = (1 << UART0_IRQ) | (1 << VIRTIO0_IRQ) |
                           (1 << VIRTIO1_IRQ);
  // accept every priority above 0
  PLIC_REG(PLIC_SPRIORITY) = 0;
}

// The highest-priority pending source, now claimed; 0 if none.
int
plic_claim(void)
{
  return PLIC_REG(PLIC_SCLAIM);
}

// Done with source irq.
void
plic_complete(int irq)
{
  PLIC_REG(PLIC_SCLAIM) = irq;
}
