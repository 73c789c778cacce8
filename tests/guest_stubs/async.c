// async.c: a virtio request that a device completes later, on a host thread (the AI
// device's pattern). The test's echo device at VIRTIO1 upper-cases the readable buffer
// into the writable one after a delay; the stub waits in wfi until the used ring moves
// (interrupt VIRTIO1_IRQ through the PLIC), twice.
#include "stub.h"
#include "virtio.h"

#define REG(r) (*(volatile uint32 *)(VIRTIO1 + (r)))
#define NUM VIRTIO_NUM

static struct virtq_desc desc[NUM] __attribute__((aligned(16)));
static struct virtq_avail avail __attribute__((aligned(2)));
static struct virtq_used used __attribute__((aligned(4)));
static volatile int irqs;

void
trap(struct frame *f)
{
  int irq = R32(PLIC_SCLAIM);
  if(irq == VIRTIO1_IRQ){
    REG(VIRTIO_MMIO_INTERRUPT_ACK) = REG(VIRTIO_MMIO_INTERRUPT_STATUS) & 3;
    irqs++;
  }
  R32(PLIC_SCLAIM) = irq;
}

static void
ask(const char *in, int n, char *out, int room)
{
  uint16 seen = used.idx;
  int waits = 0;

  desc[0] = (struct virtq_desc){(uint64)in, n, VRING_DESC_F_NEXT, 1};
  desc[1] = (struct virtq_desc){(uint64)out, room, VRING_DESC_F_WRITE, 0};
  avail.ring[avail.idx % NUM] = 0;
  __sync_synchronize();
  avail.idx++;
  __sync_synchronize();
  REG(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;
  while(*(volatile uint16 *)&used.idx == seen){
    asm volatile("wfi");
    waits++;
  }
  puts(out);
  puts(waits > 0 ? " (waited)\n" : " (no wait?)\n");
}

int
main(void)
{
  static char a[] = "hello async", b[] = "second request";
  static char out1[32], out2[32];
  uint32 st = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER;

  csrw(stvec, trapvec);
  R32(PLIC_PRIORITY + VIRTIO1_IRQ * 4) = 1;
  R32(PLIC_SENABLE) = 1 << VIRTIO1_IRQ;
  csrs(sie, SIE_SEIE);
  csrs(sstatus, SSTATUS_SIE);
  if(REG(VIRTIO_MMIO_MAGIC_VALUE) != VIRTIO_MAGIC)
    return 1;
  REG(VIRTIO_MMIO_STATUS) = st;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_FEATURES_OK;
  REG(VIRTIO_MMIO_QUEUE_NUM) = NUM;
  REG(VIRTIO_MMIO_QUEUE_DESC_LOW) = (uint64)desc;
  REG(VIRTIO_MMIO_DRIVER_DESC_LOW) = (uint64)&avail;
  REG(VIRTIO_MMIO_DEVICE_DESC_LOW) = (uint64)&used;
  REG(VIRTIO_MMIO_QUEUE_READY) = 1;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_DRIVER_OK;
  ask(a, sizeof(a), out1, sizeof(out1));
  ask(b, sizeof(b), out2, sizeof(out2));
  puts(irqs >= 2 ? "irqs ok\n" : "irqs missing\n");
  return 0;
}
