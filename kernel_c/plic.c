// plic.c: the platform-level interrupt controller (harness/devices/plic.py).
//
// Device interrupts (UART0_IRQ, VIRTIO0_IRQ, VIRTIO1_IRQ) arrive as one
// supervisor external interrupt (SEIP). The handler claims the source
// number, services it, and completes it so the PLIC can raise it again.
// Register offsets are QEMU virt's: hart h's S-mode context is context
// 2h+1. Every hart enables every source, so whichever hart claims first
// services a device; the others claim 0 and go on.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "riscv.h"
#include "defs.h"

#define PLIC_REG(a) (*(volatile uint32*)(a))
#define PLIC_SENABLE_H(h)   (PLIC_SENABLE + (h)*PLIC_SENABLE_STRIDE)
#define PLIC_SPRIORITY_H(h) (PLIC_SPRIORITY + (h)*PLIC_SCONTEXT_STRIDE)
#define PLIC_SCLAIM_H(h)    (PLIC_SCLAIM + (h)*PLIC_SCONTEXT_STRIDE)

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
  int hart = cpuid();

  PLIC_REG(PLIC_SENABLE_H(hart)) = (1 << UART0_IRQ) | (1 << VIRTIO0_IRQ) |
                                   (1 << VIRTIO1_IRQ);
  // accept every priority above 0
  PLIC_REG(PLIC_SPRIORITY_H(hart)) = 0;
}

// The highest-priority pending source, now claimed; 0 if none.
int
plic_claim(void)
{
  return PLIC_REG(PLIC_SCLAIM_H(cpuid()));
}

// Done with source irq.
void
plic_complete(int irq)
{
  PLIC_REG(PLIC_SCLAIM_H(cpuid())) = irq;
}
