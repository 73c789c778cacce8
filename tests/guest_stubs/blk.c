// blk.c: a minimal virtio-mmio v2 block driver: feature negotiation, one queue,
// interrupt-driven completion through the PLIC. Reads sector 0, writes sector 1
// and reads it back, reads past the end (expects IOERR).
#include "stub.h"
#include "virtio.h"

#define REG(r) (*(volatile uint32 *)(VIRTIO0 + (r)))
#define NUM VIRTIO_NUM

static struct virtq_desc desc[NUM] __attribute__((aligned(16)));
static struct virtq_avail avail __attribute__((aligned(2)));
static struct virtq_used used __attribute__((aligned(4)));
static struct virtio_blk_req hdr;
static volatile uint8 status;
static char buf[512], buf2[512];
static volatile int irqs;
static uint16 last_used;

void
trap(struct frame *f)
{
  int irq = R32(PLIC_SCLAIM);
  if(irq == VIRTIO0_IRQ){
    REG(VIRTIO_MMIO_INTERRUPT_ACK) = REG(VIRTIO_MMIO_INTERRUPT_STATUS) & 3;
    irqs++;
  }
  R32(PLIC_SCLAIM) = irq;
}

static void
fail(const char *why)
{
  puts("FAIL ");
  puts(why);
  putc('\n');
  power(POWER_FAIL, 4);
}

static void
init(void)
{
  uint32 st = 0;

  if(REG(VIRTIO_MMIO_MAGIC_VALUE) != VIRTIO_MAGIC || REG(VIRTIO_MMIO_VERSION) != 2 ||
     REG(VIRTIO_MMIO_DEVICE_ID) != VIRTIO_ID_BLOCK)
    fail("identity");
  REG(VIRTIO_MMIO_STATUS) = 0;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_ACKNOWLEDGE;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_DRIVER;
  REG(VIRTIO_MMIO_DEVICE_FEATURES_SEL) = 1;
  if((REG(VIRTIO_MMIO_DEVICE_FEATURES) & 1) == 0)
    fail("no VERSION_1");
  REG(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 1;
  REG(VIRTIO_MMIO_DRIVER_FEATURES) = 1;        // VIRTIO_F_VERSION_1 (bit 32)
  REG(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 0;
  REG(VIRTIO_MMIO_DRIVER_FEATURES) = 1 << 30;  // not offered: must be refused
  REG(VIRTIO_MMIO_STATUS) = st | VIRTIO_STATUS_FEATURES_OK;
  if(REG(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK)
    fail("accepted an unoffered feature");
  REG(VIRTIO_MMIO_DRIVER_FEATURES) = 0;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_FEATURES_OK;
  if(!(REG(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK))
    fail("features refused");
  REG(VIRTIO_MMIO_QUEUE_SEL) = 0;
  if(REG(VIRTIO_MMIO_QUEUE_READY) || REG(VIRTIO_MMIO_QUEUE_NUM_MAX) < NUM)
    fail("queue");
  REG(VIRTIO_MMIO_QUEUE_NUM) = NUM;
  REG(VIRTIO_MMIO_QUEUE_DESC_LOW) = (uint64)desc;
  REG(VIRTIO_MMIO_QUEUE_DESC_HIGH) = (uint64)desc >> 32;
  REG(VIRTIO_MMIO_DRIVER_DESC_LOW) = (uint64)&avail;
  REG(VIRTIO_MMIO_DRIVER_DESC_HIGH) = (uint64)&avail >> 32;
  REG(VIRTIO_MMIO_DEVICE_DESC_LOW) = (uint64)&used;
  REG(VIRTIO_MMIO_DEVICE_DESC_HIGH) = (uint64)&used >> 32;
  REG(VIRTIO_MMIO_QUEUE_READY) = 1;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_DRIVER_OK;
}

// One request; returns the status byte.
static int
rw(uint64 sector, char *data, int write)
{
  hdr.type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN;
  hdr.reserved = 0;
  hdr.sector = sector;
  status = 0xff;
  desc[0] = (struct virtq_desc){(uint64)&hdr, sizeof(hdr), VRING_DESC_F_NEXT, 1};
  desc[1] = (struct virtq_desc){(uint64)data, 512,
                                (write ? 0 : VRING_DESC_F_WRITE) | VRING_DESC_F_NEXT, 2};
  desc[2] = (struct virtq_desc){(uint64)&status, 1, VRING_DESC_F_WRITE, 0};
  avail.ring[avail.idx % NUM] = 0;
  __sync_synchronize();
  avail.idx++;
  __sync_synchronize();
  REG(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;
  while(*(volatile uint16 *)&used.idx == last_used)
    asm volatile("wfi");
  if(used.ring[last_used % NUM].id != 0)
    fail("used id");
  last_used++;
  return status;
}

int
main(void)
{
  uint64 cap;

  csrw(stvec, trapvec);
  R32(PLIC_PRIORITY + VIRTIO0_IRQ * 4) = 1;
  R32(PLIC_SENABLE) = 1 << VIRTIO0_IRQ;
  csrs(sie, SIE_SEIE);
  csrs(sstatus, SSTATUS_SIE);
  init();
  cap = *(volatile uint64 *)(VIRTIO0 + VIRTIO_BLK_CONFIG_CAPACITY);
  puts("capacity ");
  putdec(cap);
  putc('\n');
  if(rw(0, buf, 0) != VIRTIO_BLK_S_OK)
    fail("read 0");
  buf[15] = 0;
  puts("sector0 ");
  puts(buf);
  putc('\n');
  for(int i = 0; i < 512; i++)
    buf[i] = "written by the stub "[i % 20];
  if(rw(1, buf, 1) != VIRTIO_BLK_S_OK || rw(1, buf2, 0) != VIRTIO_BLK_S_OK)
    fail("write/read 1");
  for(int i = 0; i < 512; i++)
    if(buf2[i] != buf[i])
      fail("readback");
  puts("readback ok\n");
  if(rw(cap, buf2, 0) != VIRTIO_BLK_S_IOERR)
    fail("read past the end");
  puts("ioerr ok\n");
  while(irqs < 4)
    asm volatile("wfi");
  puts("irqs ok\n");
  return 0;
}
