// bio.c: the buffer cache, NBUF disk blocks kept in memory.
//
// A block has at most one buffer, so every user of a block sees the same
// copy, and each buffer has a sleep lock so only one process uses it at a
// time. Interface:
//   bread(dev, blockno)  a locked buffer holding that block
//   bwrite(b)            write it to disk now (file-system code calls
//                        log_write() instead: log.c)
//   brelse(b)            unlock it; it stays cached
//   bpin/bunpin(b)       keep b cached while the log holds its only copy
// Recycling picks the least recently released buffer with no references.

#include "types.h"
#include "param.h"
#include "spinlock.h"
#include "sleeplock.h"
#include "riscv.h"
#include "defs.h"
#include "fs.h"
#include "buf.h"

static struct {
  struct spinlock lock;
  struct buf buf[NBUF];
  // every buffer, on a circular list through head; head.next is the most
  // recently used
  struct buf head;
} bcache;

void
binit(void)
{
  struct buf *b;

  initlock(&bcache.lock, "bcache");
  bcache.head.prev = &bcache.head;
  bcache.head.next = &bcache.head;
  for(b = bcache.buf; b < bcache.buf+NBUF; b++){
    b->next = bcache.head.next;
    b->prev = &bcache.head;
    initsleeplock(&b->lock, "buffer");
    bcache.head.next->prev = b;
    bcache.head.next = b;
  }
}

// The buffer for (dev, blockno), locked; reads nothing from disk.
static struct buf*
bget(uint dev, uint blockno)
{
  struct buf *b;

  acquire(&bcache.lock);
  for(b = bcache.head.next; b != &bcache.head; b = b->next){
    if(b->dev == dev && b->blockno == blockno){
      b->refcnt++;
      release(&bcache.lock);
      acquiresleep(&b->lock);
      return b;
    }
  }
  // not cached: take the least recently used free buffer
  for(b = bcache.head.prev; b != &bcache.head; b = b->prev){
    if(b->refcnt == 0){
      b->dev = dev;
      b->blockno = blockno;
      b->valid = 0;
      b->refcnt = 1;
      release(&bcache.lock);
      acquiresleep(&b->lock);
      return b;
    }
  }
  // every buffer is in use: each process holds at most a few at once, so
  // this means a leak
  panic("bget: no buffers");
}

// A locked buffer with the contents of the block.
struct buf*
bread(uint dev, uint blockno)
{
  struct buf *b;

  b = bget(dev, blockno);
  if(!b->valid){
    virtio_disk_rw(b, 0);
    b->valid = 1;
  }
  return b;
}

// Write b's contents to disk. Caller holds b->lock.
void
bwrite(struct buf *b)
{
  if(!holdingsleep(&b->lock))
    panic("bwrite: not locked");
  virtio_disk_rw(b, 1);
}

// Release a locked buffer and move it to the head of the LRU list.
void
brelse(struct buf *b)
{
  if(!holdingsleep(&b->lock))
    panic("brelse: not locked");
  releasesleep(&b->lock);

  acquire(&bcache.lock);
  b->refcnt--;
  if(b->refcnt == 0){
    b->next->prev = b->prev;
    b->prev->next = b->next;
    b->next = bcache.head.next;
    b->prev = &bcache.head;
    bcache.head.next->prev = b;
    bcache.head.next = b;
  }
  release(&bcache.lock);
}

// One more reference, so b is not recycled before the log installs it.
void
bpin(struct buf *b)
{
  acquire(&bcache.lock);
  b->refcnt++;
  release(&bcache.lock);
}

void
bunpin(struct buf *b)
{
  acquire(&bcache.lock);
  b->refcnt--;
  release(&bcache.lock);
}
