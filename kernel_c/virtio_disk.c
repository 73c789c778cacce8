// virtio_disk.c: driver for the virtio-mmio (version 2) block device at
// VIRTIO0 that holds the file system (harness/devices/virtio_blk.py).
//
// One virtqueue of VIRTIO_NUM descriptors; each request is a chain of
// three: the request header (device reads), the BSIZE data buffer (device
// reads or writes), and a status byte (device writes); a flush is a chain
// of two, with no data. The caller sleeps until the completion interrupt
// (VIRTIO0_IRQ) marks its request done.
//
// A write is complete when the device says so, but it is on the disk only
// after a later flush completes: between two flushes the disk may keep the
// writes in any order, or lose any of them if the power goes. The log
// (log.c) calls virtio_disk_flush() wherever its writes must be ordered.

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "sleeplock.h"
#include "fs.h"
#include "buf.h"
#include "virtio.h"

#define R(r) ((volatile uint32 *)(VIRTIO0 + (r)))

static struct disk {
  struct virtq_desc *desc;      // VIRTIO_NUM descriptors (one page)
  struct virtq_avail *avail;    // chains offered to the device (one page)
  struct virtq_used *used;      // chains the device finished (one page)

  char free[VIRTIO_NUM];        // is descriptor i free?
  uint16 used_idx;              // how far we have read used->ring

  // per head descriptor of an in-flight chain
  struct {
    struct buf *b;              // 0 for a flush
    char status;                // device writes VIRTIO_BLK_S_*
    char done;                  // a flush has completed
  } info[VIRTIO_NUM];
  struct virtio_blk_req ops[VIRTIO_NUM]; // the request headers

  uint64 capacity;              // disk size in sectors
  struct spinlock vdisk_lock;
  int descwait;         // processes asleep for free descriptors: freeing
                        // wakes only then (wakeup() scans every process)
} disk;

static void virtio_disk_intr(void);

// Tell the device we give up (bad device or features), then stop.
static void
fail(char *why)
{
  *R(VIRTIO_MMIO_STATUS) = *R(VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_FAILED;
  panic("virtio_disk_init: %s", why);
}

// Reset and configure the device (virtio 1.1, section 3.1.1).
void
virtio_disk_init(void)
{
  uint32 status = 0, features, max;
  int i;

  initlock(&disk.vdisk_lock, "virtio_disk");

  if(*R(VIRTIO_MMIO_MAGIC_VALUE) != VIRTIO_MAGIC ||
     *R(VIRTIO_MMIO_VERSION) != VIRTIO_VERSION ||
     *R(VIRTIO_MMIO_DEVICE_ID) != VIRTIO_ID_BLOCK)
    panic("virtio_disk_init: no virtio block device at 0x%lx", VIRTIO0);

  *R(VIRTIO_MMIO_STATUS) = status;              // reset
  status |= VIRTIO_STATUS_ACKNOWLEDGE;
  *R(VIRTIO_MMIO_STATUS) = status;
  status |= VIRTIO_STATUS_DRIVER;
  *R(VIRTIO_MMIO_STATUS) = status;

  // feature bits 0..31: we need flushes and none of the optional ones
  // (multi-queue, event index, indirect descriptors, ...), and a
  // read-only disk cannot hold our file system
  *R(VIRTIO_MMIO_DEVICE_FEATURES_SEL) = 0;
  features = *R(VIRTIO_MMIO_DEVICE_FEATURES);
  if(features & (1 << VIRTIO_BLK_F_RO))
    fail("the disk is read-only");
  if(!(features & (1 << VIRTIO_BLK_F_FLUSH)))
    fail("the disk cannot flush its writes");
  *R(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 0;
  *R(VIRTIO_MMIO_DRIVER_FEATURES) = 1 << VIRTIO_BLK_F_FLUSH;
  // bits 32..63: a modern device needs VIRTIO_F_VERSION_1 accepted
  *R(VIRTIO_MMIO_DEVICE_FEATURES_SEL) = 1;
  features = *R(VIRTIO_MMIO_DEVICE_FEATURES) & (1 << (VIRTIO_F_VERSION_1 - 32));
  *R(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 1;
  *R(VIRTIO_MMIO_DRIVER_FEATURES) = features;

  status |= VIRTIO_STATUS_FEATURES_OK;
  *R(VIRTIO_MMIO_STATUS) = status;
  if(!(*R(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK))
    fail("FEATURES_OK not accepted");

  // queue 0
  *R(VIRTIO_MMIO_QUEUE_SEL) = 0;
  if(*R(VIRTIO_MMIO_QUEUE_READY))
    fail("queue 0 already in use");
  max = *R(VIRTIO_MMIO_QUEUE_NUM_MAX);
  if(max < VIRTIO_NUM)
    fail("queue 0 too short");

  disk.desc = kalloc();
  disk.avail = kalloc();
  disk.used = kalloc();
  if(!disk.desc || !disk.avail || !disk.used)
    panic("virtio_disk_init: out of memory");
  memset(disk.desc, 0, PGSIZE);
  memset(disk.avail, 0, PGSIZE);
  memset(disk.used, 0, PGSIZE);

  *R(VIRTIO_MMIO_QUEUE_NUM) = VIRTIO_NUM;
  *R(VIRTIO_MMIO_QUEUE_DESC_LOW) = (uint64)disk.desc;
  *R(VIRTIO_MMIO_QUEUE_DESC_HIGH) = (uint64)disk.desc >> 32;
  *R(VIRTIO_MMIO_DRIVER_DESC_LOW) = (uint64)disk.avail;
  *R(VIRTIO_MMIO_DRIVER_DESC_HIGH) = (uint64)disk.avail >> 32;
  *R(VIRTIO_MMIO_DEVICE_DESC_LOW) = (uint64)disk.used;
  *R(VIRTIO_MMIO_DEVICE_DESC_HIGH) = (uint64)disk.used >> 32;
  *R(VIRTIO_MMIO_QUEUE_READY) = 1;

  for(i = 0; i < VIRTIO_NUM; i++)
    disk.free[i] = 1;

  disk.capacity = *R(VIRTIO_BLK_CONFIG_CAPACITY) |
                  ((uint64)*R(VIRTIO_BLK_CONFIG_CAPACITY + 4) << 32);

  status |= VIRTIO_STATUS_DRIVER_OK;
  *R(VIRTIO_MMIO_STATUS) = status;

  irq_register(VIRTIO0_IRQ, virtio_disk_intr);
}

// Disk size in BSIZE blocks.
uint64
virtio_disk_blocks(void)
{
  return disk.capacity / (BSIZE / VIRTIO_BLK_SECTOR);
}

// A free descriptor, marked used; -1 if none.
static int
alloc_desc(void)
{
  int i;

  for(i = 0; i < VIRTIO_NUM; i++){
    if(disk.free[i]){
      disk.free[i] = 0;
      return i;
    }
  }
  return -1;
}

static void
free_desc(int i)
{
  if(i >= VIRTIO_NUM || disk.free[i])
    panic("virtio_disk: bad free of descriptor %d", i);
  disk.desc[i].addr = 0;
  disk.desc[i].len = 0;
  disk.desc[i].flags = 0;
  disk.desc[i].next = 0;
  disk.free[i] = 1;
  if(disk.descwait)
    wakeup(&disk.free[0]);
}

// Free a chain starting at descriptor i.
static void
free_chain(int i)
{
  int flag, nxt;

  for(;;){
    flag = disk.desc[i].flags;
    nxt = disk.desc[i].next;
    free_desc(i);
    if(!(flag & VRING_DESC_F_NEXT))
      break;
    i = nxt;
  }
}

// n free descriptors, or -1 (none taken) if there are not enough.
static int
allocn_desc(int *idx, int n)
{
  int i, j;

  for(i = 0; i < n; i++){
    idx[i] = alloc_desc();
    if(idx[i] < 0){
      for(j = 0; j < i; j++)
        free_desc(idx[j]);
      return -1;
    }
  }
  return 0;
}

// Offer the chain at head to the device. Caller holds vdisk_lock.
static void
offer(int head)
{
  // the device must see the descriptors before the index
  disk.avail->ring[disk.avail->idx % VIRTIO_NUM] = head;
  __sync_synchronize();
  disk.avail->idx += 1;
  __sync_synchronize();
  *R(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;
}

// Read (write = 0) or write block b->blockno through buffer b, sleeping
// until the device is done. Caller holds b->lock.
void
virtio_disk_rw(struct buf *b, int write)
{
  uint64 sector = b->blockno * (BSIZE / VIRTIO_BLK_SECTOR);
  struct virtio_blk_req *req;
  int idx[3];

  if(sector + BSIZE / VIRTIO_BLK_SECTOR > disk.capacity)
    panic("virtio_disk_rw: block %d beyond the disk", b->blockno);

  acquire(&disk.vdisk_lock);
  while(allocn_desc(idx, 3) != 0){
    disk.descwait++;
    sleep(&disk.free[0], &disk.vdisk_lock);
    disk.descwait--;
  }

  req = &disk.ops[idx[0]];
  req->type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN;
  req->reserved = 0;
  req->sector = sector;

  disk.desc[idx[0]].addr = (uint64)req;
  disk.desc[idx[0]].len = sizeof(*req);
  disk.desc[idx[0]].flags = VRING_DESC_F_NEXT;
  disk.desc[idx[0]].next = idx[1];

  disk.desc[idx[1]].addr = (uint64)b->data;
  disk.desc[idx[1]].len = BSIZE;
  disk.desc[idx[1]].flags = (write ? 0 : VRING_DESC_F_WRITE) | VRING_DESC_F_NEXT;
  disk.desc[idx[1]].next = idx[2];

  disk.info[idx[0]].status = 0xff;      // the device sets 0 on success
  disk.desc[idx[2]].addr = (uint64)&disk.info[idx[0]].status;
  disk.desc[idx[2]].len = 1;
  disk.desc[idx[2]].flags = VRING_DESC_F_WRITE;
  disk.desc[idx[2]].next = 0;

  b->disk = 1;
  disk.info[idx[0]].b = b;

  offer(idx[0]);
  while(b->disk == 1)
    sleep(b, &disk.vdisk_lock);

  disk.info[idx[0]].b = 0;
  free_chain(idx[0]);
  release(&disk.vdisk_lock);
}

// Wait until every write completed so far is on the disk (a barrier).
void
virtio_disk_flush(void)
{
  struct virtio_blk_req *req;
  int idx[2];

  acquire(&disk.vdisk_lock);
  while(allocn_desc(idx, 2) != 0){
    disk.descwait++;
    sleep(&disk.free[0], &disk.vdisk_lock);
    disk.descwait--;
  }

  req = &disk.ops[idx[0]];
  req->type = VIRTIO_BLK_T_FLUSH;
  req->reserved = 0;
  req->sector = 0;

  disk.desc[idx[0]].addr = (uint64)req;
  disk.desc[idx[0]].len = sizeof(*req);
  disk.desc[idx[0]].flags = VRING_DESC_F_NEXT;
  disk.desc[idx[0]].next = idx[1];

  disk.info[idx[0]].status = 0xff;
  disk.desc[idx[1]].addr = (uint64)&disk.info[idx[0]].status;
  disk.desc[idx[1]].len = 1;
  disk.desc[idx[1]].flags = VRING_DESC_F_WRITE;
  disk.desc[idx[1]].next = 0;

  disk.info[idx[0]].b = 0;
  disk.info[idx[0]].done = 0;
  offer(idx[0]);
  while(disk.info[idx[0]].done == 0)
    sleep(&disk.info[idx[0]], &disk.vdisk_lock);

  free_chain(idx[0]);
  release(&disk.vdisk_lock);
}

// Completion interrupt: mark every finished buffer done and wake its
// owner.
static void
virtio_disk_intr(void)
{
  int id;
  struct buf *b;

  acquire(&disk.vdisk_lock);

  // acknowledge first, so a completion that lands while we scan raises a
  // new interrupt instead of being lost
  *R(VIRTIO_MMIO_INTERRUPT_ACK) = *R(VIRTIO_MMIO_INTERRUPT_STATUS) & 0x3;
  __sync_synchronize();

  while(disk.used_idx != disk.used->idx){
    __sync_synchronize();
    id = disk.used->ring[disk.used_idx % VIRTIO_NUM].id;
    if(id < 0 || id >= VIRTIO_NUM || disk.free[id])
      panic("virtio_disk_intr: bad used id %d", id);
    b = disk.info[id].b;
    if(disk.info[id].status != VIRTIO_BLK_S_OK)
      panic("virtio_disk_intr: %s %d: device status %d", b ? "block" : "flush",
            b ? b->blockno : 0, disk.info[id].status);
    if(b){
      b->disk = 0;
      wakeup(b);
    } else {
      disk.info[id].done = 1;
      wakeup(&disk.info[id]);
    }
    disk.used_idx += 1;
  }

  release(&disk.vdisk_lock);
}
