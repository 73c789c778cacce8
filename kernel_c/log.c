// log.c: the file system's write-ahead log, so that each system call's
// changes reach the disk all or nothing, whenever the power goes.
//
// A system call brackets its file-system work with begin_op()/end_op();
// inside, it changes blocks in the buffer cache and calls log_write(b)
// instead of bwrite(b). log_write() only notes the block number and pins
// the buffer in the cache. When the last outstanding operation ends,
// end_op() commits every operation since the last commit at once (group
// commit):
//
//   1. write_log()      copy each changed block to its slot in the log
//   2. write_head()     write the header: n blocks, and where each goes.
//                       This single block write is the commit point.
//   3. install_trans()  copy the logged blocks to their home locations
//   4. write_head()     with n = 0: the transaction is done
//
// with a disk flush (a barrier: everything before it is on the disk)
// after each step, since the disk may reorder the writes between two
// flushes. After a crash, initlog() (at mount) re-runs step 3 if the
// header holds a committed transaction, and steps 3 and 4 are safe to
// repeat. A crash before step 2 completes loses the whole transaction;
// nothing of it was written outside the log.
//
// begin_op() waits while a commit is running, or while the operations
// already in the transaction might, together with this one, fill the log
// (each may write MAXOPBLOCKS blocks). On-disk layout: fs.h.

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "spinlock.h"
#include "sleeplock.h"
#include "fs.h"
#include "buf.h"
#include "bootinfo.h"

extern struct superblock sb;     // fs.c

static struct {
  struct spinlock lock;
  int start;            // block number of the header
  int size;             // blocks in the log, header included
  int outstanding;      // system calls between begin_op and end_op
  int committing;       // commit() is running: begin_op must wait
  int waiting;          // begin_op()s asleep: end_op wakes only if any
                        // (a wakeup() scans the whole process table)
  int dev;
  int enabled;          // 0: log_write writes through (the --no-log bench build)
  struct logheader lh;  // the transaction being built
} log;

static int recover_from_log(void);
static void commit(void);

// Set up the log from the superblock and recover a committed transaction.
// Returns 0, or -1 (with a message) if the log header is corrupt; the file
// system must not be used then.
int
initlog(int dev, struct superblock *sb)
{
  if(sizeof(struct logheader) >= BSIZE)
    panic("initlog: log header too big");

  initlock(&log.lock, "log");
  log.start = sb->logstart;
  log.size = sb->nlog;
  log.dev = dev;
  log.enabled = !(bootinfo.flags & BOOT_F_NOLOG);
  return recover_from_log();
}

// Copy each logged block from the log to its home location.
static void
install_trans(int recovering)
{
  int tail;

  for(tail = 0; tail < log.lh.n; tail++){
    struct buf *lbuf = bread(log.dev, log.start + tail + 1);
    struct buf *dbuf = bread(log.dev, log.lh.block[tail]);
    memmove(dbuf->data, lbuf->data, BSIZE);
    bwrite(dbuf);
    if(!recovering)
      bunpin(dbuf);     // log_write pinned it
    brelse(lbuf);
    brelse(dbuf);
  }
}

// Read the header from disk into log.lh. Returns -1 if it cannot be a
// header this kernel wrote: more blocks than the log holds, or a home
// block outside the inode, bitmap and data blocks.
static int
read_head(void)
{
  struct buf *buf = bread(log.dev, log.start);
  struct logheader *lh = (struct logheader *)(buf->data);
  int i, ok = 1;

  if(lh->n > LOGBLOCKS || lh->n >= log.size){
    printf("log: header says %d blocks, the log holds %d\n", lh->n, log.size - 1);
    ok = 0;
  }
  for(i = 0; ok && i < lh->n; i++){
    if(lh->block[i] < sb.inodestart || lh->block[i] >= sb.size){
      printf("log: logged block %d outside the file system\n", lh->block[i]);
      ok = 0;
    }
  }
  log.lh.n = ok ? lh->n : 0;
  for(i = 0; i < log.lh.n; i++)
    log.lh.block[i] = lh->block[i];
  brelse(buf);
  return ok ? 0 : -1;
}

// Write log.lh to the header block. With n > 0 this is the commit point.
static void
write_head(void)
{
  struct buf *buf = bread(log.dev, log.start);
  struct logheader *hb = (struct logheader *)(buf->data);
  int i;

  hb->n = log.lh.n;
  for(i = 0; i < log.lh.n; i++)
    hb->block[i] = log.lh.block[i];
  bwrite(buf);
  brelse(buf);
}

static int
recover_from_log(void)
{
  if(read_head() < 0)
    return -1;
  if(log.lh.n == 0)
    return 0;           // a clean disk: mount writes nothing
  printf("log: recovering %d blocks of a committed transaction\n", log.lh.n);
  install_trans(1);
  virtio_disk_flush();
  log.lh.n = 0;
  write_head();         // the transaction is done
  virtio_disk_flush();
  return 0;
}

// Called at the start of each file-system system call.
void
begin_op(void)
{
  acquire(&log.lock);
  while(1){
    if(log.committing ||
       log.lh.n + (log.outstanding+1)*MAXOPBLOCKS > LOGBLOCKS){
      // a commit is running, or this operation might exhaust the log:
      // wait for the commit
      log.waiting++;
      sleep(&log, &log.lock);
      log.waiting--;
    } else {
      log.outstanding += 1;
      release(&log.lock);
      break;
    }
  }
}

// Called at the end of each file-system system call; commits if this was
// the last outstanding operation.
void
end_op(void)
{
  int do_commit = 0;

  acquire(&log.lock);
  log.outstanding -= 1;
  if(log.committing)
    panic("end_op: commit running");
  if(log.outstanding == 0){
    do_commit = 1;
    log.committing = 1;
  } else {
    // begin_op() may be waiting for log space, and decrementing
    // log.outstanding has decreased the amount of reserved space
    if(log.waiting)
      wakeup(&log);
  }
  release(&log.lock);

  if(do_commit){
    // commit without holding the lock: it sleeps on the disk
    commit();
    acquire(&log.lock);
    log.committing = 0;
    if(log.waiting)
      wakeup(&log);
    release(&log.lock);
  }
}

// Copy the changed blocks from the cache to the log.
static void
write_log(void)
{
  int tail;

  for(tail = 0; tail < log.lh.n; tail++){
    struct buf *to = bread(log.dev, log.start + tail + 1);
    struct buf *from = bread(log.dev, log.lh.block[tail]);
    memmove(to->data, from->data, BSIZE);
    bwrite(to);
    brelse(from);
    brelse(to);
  }
}

static void
commit(void)
{
  if(log.lh.n == 0)
    return;
  write_log();
  virtio_disk_flush();  // the log's contents before the header naming them
  write_head();         // the commit point
  virtio_disk_flush();  // committed before any home block changes
  install_trans(0);
  virtio_disk_flush();  // installed before the header is cleared
  log.lh.n = 0;
  write_head();
  virtio_disk_flush();  // cleared before the next commit reuses the log
}

// Record that b (changed, and locked by the caller) belongs to the current
// transaction, in place of bwrite(b). The buffer stays pinned in the cache
// until the commit has installed it. A block changed twice in one
// transaction takes one slot (absorption).
void
log_write(struct buf *b)
{
  int i;

  if(!log.enabled){
    bwrite(b);
    return;
  }
  acquire(&log.lock);
  if(log.lh.n >= LOGBLOCKS || log.lh.n >= log.size - 1)
    panic("log_write: transaction too big");
  if(log.outstanding < 1)
    panic("log_write: outside of a transaction");

  for(i = 0; i < log.lh.n; i++){
    if(log.lh.block[i] == b->blockno)
      break;
  }
  log.lh.block[i] = b->blockno;
  if(i == log.lh.n){
    bpin(b);
    log.lh.n++;
  }
  release(&log.lock);
}
