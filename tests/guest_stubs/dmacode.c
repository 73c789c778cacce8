// dmacode.c: code that arrives by DMA must replace code already executed at the same
// address (the harness drops Unicorn's translations of memory a device writes).
// Sector 0 of the disk holds "li a0,1; ret", sector 1 "li a0,2; ret".
#include "stub.h"
#include "virtio.h"

#define REG(r) (*(volatile uint32 *)(VIRTIO0 + (r)))
#define NUM VIRTIO_NUM

static struct virtq_desc desc[NUM] __attribute__((aligned(16)));
static struct virtq_avail avail __attribute__((aligned(2)));
static struct virtq_used used __attribute__((aligned(4)));
static struct virtio_blk_req hdr;
static volatile uint8 status;
static char code[512] __attribute__((aligned(4096)));

static void
load(uint64 sector)
{
  uint16 seen = used.idx;

  hdr.type = VIRTIO_BLK_T_IN;
  hdr.sector = sector;
  desc[0] = (struct virtq_desc){(uint64)&hdr, sizeof(hdr), VRING_DESC_F_NEXT, 1};
  desc[1] = (struct virtq_desc){(uint64)code, 512, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 2};
  desc[2] = (struct virtq_desc){(uint64)&status, 1, VRING_DESC_F_WRITE, 0};
  avail.ring[avail.idx % NUM] = 0;
  __sync_synchronize();
  avail.idx++;
  __sync_synchronize();
  REG(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;
  while(*(volatile uint16 *)&used.idx == seen)
    ;
  asm volatile("fence.i");
}

int
main(void)
{
  int (*fn)(void) = (int (*)(void))code;
  int a, b;

  REG(VIRTIO_MMIO_STATUS) = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER;
  REG(VIRTIO_MMIO_STATUS) = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
                            VIRTIO_STATUS_FEATURES_OK;
  REG(VIRTIO_MMIO_QUEUE_NUM) = NUM;
  REG(VIRTIO_MMIO_QUEUE_DESC_LOW) = (uint64)desc;
  REG(VIRTIO_MMIO_DRIVER_DESC_LOW) = (uint64)&avail;
  REG(VIRTIO_MMIO_DEVICE_DESC_LOW) = (uint64)&used;
  REG(VIRTIO_MMIO_QUEUE_READY) = 1;
  REG(VIRTIO_MMIO_STATUS) = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
                            VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK;
  load(0);
  a = fn();
  a = fn();        // twice, so the block is surely translated and cached
  load(1);
  b = fn();
  puts("code ");
  putdec(a);
  putc(' ');
  putdec(b);
  putc('\n');
  return 0;
}
