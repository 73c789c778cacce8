// fs.c: the file system: blocks, inodes, directories and path names.
//
// Four layers, bottom up:
//   blocks       balloc/bfree: the free bit map
//   inodes       ialloc/iget/ilock/iput/readi/writei: files as block lists
//   directories  dirlookup/dirlink: files of struct dirent
//   path names   namei/nameiparent: "/usr/bin/x" resolved from / or cwd
// The disk format is in fs.h (the image builder harness/disk/fsimage.py reads
// it from there). Changes go through the log (log.c): a system call
// brackets its work with begin_op()/end_op() and every changed block is
// handed to log_write(), never bwrite().
//
// The disk is not trusted: the superblock is checked at mount, and an
// inode, block number or directory entry that cannot be right (a type,
// size or block outside what the superblock allows) makes the system call
// that meets it fail, never the kernel panic. Such an inode is marked
// corrupt in memory and never written back.
//
// In-memory inodes (itable) are reference counted: iget() finds or makes
// one, iput() drops a reference and frees the file when both the last
// reference and the last link are gone. ilock() reads the inode from disk
// if needed and locks it; only then are its fields valid.

#include "types.h"
#include "riscv.h"
#include "racy.h"
#include "defs.h"
#include "param.h"
#include "stat.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "sleeplock.h"
#include "fs.h"
#include "buf.h"
#include "file.h"

#define min(a, b) ((a) < (b) ? (a) : (b))

struct superblock sb;   // one disk, one file system
static uint datastart;  // first data block: every block below is metadata

static void
readsb(int dev, struct superblock *sb)
{
  struct buf *bp;

  bp = bread(dev, 1);
  memmove(sb, bp->data, sizeof(*sb));
  brelse(bp);
}

// Why superblock s cannot describe a file system on this disk, or 0. The
// regions must follow each other as the image builder lays them out.
static char*
badsb(struct superblock *s)
{
  if(s->magic != FSMAGIC)
    return "no file system on disk (bad magic)";
  if(s->size > virtio_disk_blocks() || s->size < 8)
    return "file system size does not fit the disk";
  if(s->ninodes < 2 || s->ninodes > 65535)
    return "bad inode count";
  if(s->logstart != 2 || s->nlog != LOGSIZE)
    return "bad log position or size";
  if(s->inodestart != s->logstart + s->nlog ||
     s->bmapstart != s->inodestart + s->ninodes / IPB + 1)
    return "regions out of place";
  if((uint64)s->bmapstart + s->size / BPB + 1 >= s->size ||
     s->nblocks != s->size - (s->bmapstart + s->size / BPB + 1))
    return "bad data block count";
  return 0;
}

// Read and check the superblock, then recover the log. Returns 0, or -1
// with a message if the disk holds no usable file system (the caller
// refuses to go on; nothing has been written).
int
fsinit(int dev)
{
  char *why;

  if(virtio_disk_blocks() < 2){
    printf("fsinit: refusing the disk: too small for a superblock\n");
    return -1;
  }
  readsb(dev, &sb);
  if((why = badsb(&sb)) != 0){
    printf("fsinit: refusing the disk: %s\n", why);
    return -1;
  }
  datastart = sb.bmapstart + sb.size / BPB + 1;
  if(initlog(dev, &sb) < 0){
    printf("fsinit: refusing the disk: corrupt log header\n");
    return -1;
  }
  return 0;
}

// Is bno a block a file may own (a data block inside the file system)?
static int
datablock(uint bno)
{
  return bno >= datastart && bno < sb.size;
}

// ---------------------------------------------------------------- blocks

static void
bzero(int dev, int bno)
{
  struct buf *bp;

  bp = bread(dev, bno);
  memset(bp->data, 0, BSIZE);
  log_write(bp);
  brelse(bp);
}

// Allocate a zeroed disk block. Returns 0 when the disk is full.
static uint
balloc(uint dev)
{
  int b, bi, m;
  struct buf *bp;

  for(b = 0; b < sb.size; b += BPB){
    bp = bread(dev, BBLOCK(b, sb));
    for(bi = 0; bi < BPB && b + bi < sb.size; bi++){
      // a byte without a free bit: skip its eight blocks at once (the scan
      // starts at block 0 every time, and each loop turn costs the
      // emulator more than the test in it)
      if(bi % 8 == 0 && bp->data[bi/8] == 0xFF){
        bi += 7;
        continue;
      }
      m = 1 << (bi % 8);
      // a metadata block free in a damaged bitmap is still not ours
      if((bp->data[bi/8] & m) == 0 && datablock(b + bi)){
        bp->data[bi/8] |= m;
        log_write(bp);
        brelse(bp);
        bzero(dev, b + bi);
        return b + bi;
      }
    }
    brelse(bp);
  }
  printf("balloc: out of blocks\n");
  return 0;
}

static void
bfree(int dev, uint b)
{
  struct buf *bp;
  int bi, m;

  if(!datablock(b))
    return;             // bmap() never hands these out
  bp = bread(dev, BBLOCK(b, sb));
  bi = b % BPB;
  m = 1 << (bi % 8);
  if((bp->data[bi/8] & m) == 0){
    // two files claim the block on a damaged disk; leave the bitmap be
    printf("bfree: block %d already free\n", b);
    brelse(bp);
    return;
  }
  bp->data[bi/8] &= ~m;
  log_write(bp);
  brelse(bp);
}

// ---------------------------------------------------------------- inodes

static struct {
  struct spinlock lock;
  struct inode inode[NINODE];
} itable;

void
iinit(void)
{
  int i;

  initlock(&itable.lock, "itable");
  for(i = 0; i < NINODE; i++)
    initsleeplock(&itable.inode[i].lock, "inode");
}

static struct inode* iget(uint dev, uint inum);

// Allocate a free on-disk inode of the given type. Returns it unlocked
// and referenced, or 0 if there are no free inodes.
struct inode*
ialloc(uint dev, short type)
{
  int inum;
  struct buf *bp;
  struct dinode *dip;

  for(inum = 1; inum < sb.ninodes; inum++){
    bp = bread(dev, IBLOCK(inum, sb));
    dip = (struct dinode*)bp->data + inum%IPB;
    if(dip->type == 0){
      memset(dip, 0, sizeof(*dip));
      dip->type = type;
      // one link, which the caller adds in this same transaction: so that
      // ilock() can tell it from an unlinked inode a damaged directory
      // still names
      dip->nlink = 1;
      log_write(bp);   // marks it allocated on the disk
      brelse(bp);
      return iget(dev, inum);
    }
    brelse(bp);
  }
  printf("ialloc: no inodes\n");
  return 0;
}

// Write a modified in-memory inode to disk (through the log). Caller
// holds ip->lock. A corrupt inode is never written back.
void
iupdate(struct inode *ip)
{
  struct buf *bp;
  struct dinode *dip;

  if(ip->corrupt)
    return;

  bp = bread(ip->dev, IBLOCK(ip->inum, sb));
  dip = (struct dinode*)bp->data + ip->inum%IPB;
  dip->type = ip->type;
  dip->major = ip->major;
  dip->minor = ip->minor;
  dip->nlink = ip->nlink;
  dip->size = ip->size;
  memmove(dip->addrs, ip->addrs, sizeof(ip->addrs));
  log_write(bp);
  brelse(bp);
}

// The in-memory inode for (dev, inum), referenced but not locked and not
// necessarily read from disk.
static struct inode*
iget(uint dev, uint inum)
{
  struct inode *ip, *empty;

  acquire(&itable.lock);
  empty = 0;
  for(ip = &itable.inode[0]; ip < &itable.inode[NINODE]; ip++){
    if(ip->ref > 0 && ip->dev == dev && ip->inum == inum){
      ip->ref++;
      release(&itable.lock);
      return ip;
    }
    if(empty == 0 && ip->ref == 0)
      empty = ip;
  }
  if(empty == 0)
    panic("iget: no inodes");

  ip = empty;
  ip->dev = dev;
  ip->inum = inum;
  ip->ref = 1;
  ip->valid = 0;
  release(&itable.lock);
  return ip;
}

// One more reference to ip (the ip = idup(ip1) idiom).
struct inode*
idup(struct inode *ip)
{
  acquire(&itable.lock);
  ip->ref++;
  release(&itable.lock);
  return ip;
}

// Why the inode just read from disk cannot be right, or 0.
static char*
badinode(struct inode *ip)
{
  int i;

  if(ip->type != T_DIR && ip->type != T_FILE && ip->type != T_DEVICE)
    return "bad type";
  if(ip->nlink < 1)
    return "no links but reachable";
  if(ip->size > (uint64)MAXFILE * BSIZE)
    return "size too large";
  for(i = 0; i < NDIRECT + 2; i++)
    if(ip->addrs[i] != 0 && !datablock(ip->addrs[i]))
      return "block number outside the data blocks";
  return 0;
}

// Lock ip, reading it from disk if needed. An inode that cannot be right
// is marked corrupt: it gets type 0, which every system call refuses
// before using it (callers check the type; readi/writei refuse it too).
void
ilock(struct inode *ip)
{
  struct buf *bp;
  struct dinode *dip;
  char *why;

  DATA_RACE_NEXT_LINE("a sanity check: the caller's own reference keeps ref >= 1 whatever other harts do");
  if(ip == 0 || ip->ref < 1)
    panic("ilock: bad inode");

  acquiresleep(&ip->lock);
  if(ip->valid == 0){
    bp = bread(ip->dev, IBLOCK(ip->inum, sb));
    dip = (struct dinode*)bp->data + ip->inum%IPB;
    ip->type = dip->type;
    ip->major = dip->major;
    ip->minor = dip->minor;
    ip->nlink = dip->nlink;
    ip->size = dip->size;
    memmove(ip->addrs, dip->addrs, sizeof(ip->addrs));
    brelse(bp);
    ip->valid = 1;
    ip->corrupt = 0;
    if((why = badinode(ip)) != 0){
      printf("ilock: inode %d is corrupt (%s)\n", ip->inum, why);
      ip->corrupt = 1;
      ip->type = 0;      // no T_DIR/T_FILE/T_DEVICE: refused
      ip->size = 0;
      ip->nlink = 1;    // never freed by iput either
      memset(ip->addrs, 0, sizeof(ip->addrs));
    }
  }
}

void
iunlock(struct inode *ip)
{
  DATA_RACE_NEXT_LINE("a sanity check: the caller's own reference keeps ref >= 1 whatever other harts do");
  if(ip == 0 || !holdingsleep(&ip->lock) || ip->ref < 1)
    panic("iunlock: bad inode");
  releasesleep(&ip->lock);
}

// Drop a reference. If it was the last one and the inode has no links,
// free the inode and its blocks on disk. Caller is inside a transaction
// (begin_op), since that may write.
void
iput(struct inode *ip)
{
  acquire(&itable.lock);
  if(ip->ref == 1 && ip->valid && ip->nlink == 0 && !ip->corrupt){
    // nobody else can reach ip, so its lock is free and taking it while
    // holding itable.lock cannot deadlock
    acquiresleep(&ip->lock);
    release(&itable.lock);

    itrunc(ip);
    ip->type = 0;
    iupdate(ip);
    ip->valid = 0;

    releasesleep(&ip->lock);
    acquire(&itable.lock);
  }
  ip->ref--;
  release(&itable.lock);
}

void
iunlockput(struct inode *ip)
{
  iunlock(ip);
  iput(ip);
}

// The n'th block slot of an indirect block bn: its block number,
// allocated (and recorded) on first use if alloc. Returns 0 when the disk
// is full, the slot is empty and !alloc, or it holds a number no file may
// own (a damaged disk).
static uint
indirect(struct inode *ip, uint bn, uint n, int alloc)
{
  struct buf *bp;
  uint *a, addr;

  bp = bread(ip->dev, bn);
  a = (uint*)bp->data;
  if((addr = a[n]) == 0){
    if(alloc && (addr = balloc(ip->dev)) != 0){
      a[n] = addr;
      log_write(bp);
    }
  } else if(!datablock(addr)){
    printf("bmap: inode %d: block number %d outside the disk\n", ip->inum, addr);
    addr = 0;
  }
  brelse(bp);
  return addr;
}

// The disk block holding block bn of file ip, allocated on first use if
// alloc (writei; readi does not write, and a hole only a damaged disk
// has reads as the end of the file). Returns 0 when the disk is full.
static uint
bmap(struct inode *ip, uint bn, int alloc)
{
  uint *slot;

  if(bn < NDIRECT){
    slot = &ip->addrs[bn];
  } else if(bn < NDIRECT + NINDIRECT){
    slot = &ip->addrs[NDIRECT];
    bn -= NDIRECT;
  } else if(bn < MAXFILE){
    slot = &ip->addrs[NDIRECT + 1];
    bn -= NDIRECT + NINDIRECT;
  } else {
    return 0;           // readi/writei stay below MAXFILE blocks
  }

  // the direct slot, or the (doubly) indirect block
  // (writei() writes the changed ip->addrs to disk)
  if(*slot == 0 && (!alloc || (*slot = balloc(ip->dev)) == 0))
    return 0;
  if(slot < &ip->addrs[NDIRECT])
    return *slot;
  if(slot == &ip->addrs[NDIRECT])
    return indirect(ip, *slot, bn, alloc);
  // doubly indirect: first level picks a singly indirect block
  uint mid = indirect(ip, *slot, bn / NINDIRECT, alloc);
  if(mid == 0)
    return 0;
  return indirect(ip, mid, bn % NINDIRECT, alloc);
}

// Free every block of an indirect block numbered bn; levels = 1 for a
// singly indirect block, 2 for a doubly indirect one. Frees bn too.
static void
freeindirect(struct inode *ip, uint bn, int levels)
{
  struct buf *bp;
  uint *a;
  int j;

  bp = bread(ip->dev, bn);
  a = (uint*)bp->data;
  for(j = 0; j < NINDIRECT; j++){
    if(a[j] == 0 || !datablock(a[j]))
      continue;
    if(levels > 1)
      freeindirect(ip, a[j], levels - 1);
    else
      bfree(ip->dev, a[j]);
  }
  brelse(bp);
  bfree(ip->dev, bn);
}

// Discard a file's contents. Caller holds ip->lock.
void
itrunc(struct inode *ip)
{
  int i;

  for(i = 0; i < NDIRECT; i++){
    if(ip->addrs[i]){
      bfree(ip->dev, ip->addrs[i]);
      ip->addrs[i] = 0;
    }
  }
  if(ip->addrs[NDIRECT]){
    freeindirect(ip, ip->addrs[NDIRECT], 1);
    ip->addrs[NDIRECT] = 0;
  }
  if(ip->addrs[NDIRECT+1]){
    freeindirect(ip, ip->addrs[NDIRECT+1], 2);
    ip->addrs[NDIRECT+1] = 0;
  }
  ip->size = 0;
  iupdate(ip);
}

// Fill st from ip. Caller holds ip->lock.
void
stati(struct inode *ip, struct stat *st)
{
  st->dev = ip->dev;
  st->ino = ip->inum;
  st->type = ip->type;
  st->nlink = ip->nlink;
  st->size = ip->size;
}

// Read up to n bytes at offset off of ip into dst (a user address if
// user_dst). Returns the number read (short at end of file), or -1 if dst
// is bad. Caller holds ip->lock.
int
readi(struct inode *ip, int user_dst, uint64 dst, uint off, uint n)
{
  uint tot, m, addr;
  struct buf *bp;

  if(ip->corrupt || off > ip->size || off + n < off)
    return ip->corrupt ? -1 : 0;
  if(off + n > ip->size)
    n = ip->size - off;

  for(tot = 0; tot < n; tot += m, off += m, dst += m){
    if((addr = bmap(ip, off/BSIZE, 0)) == 0)
      break;
    bp = bread(ip->dev, addr);
    m = min(n - tot, BSIZE - off%BSIZE);
    if(either_copyout(user_dst, dst, bp->data + (off % BSIZE), m) == -1){
      brelse(bp);
      return tot > 0 ? tot : -1;
    }
    brelse(bp);
  }
  return tot;
}

// Write n bytes from src (a user address if user_src) at offset off of
// ip, growing the file as needed. Returns the number written (short if
// the disk fills up), or -1 if off is past the end, the file would exceed
// MAXFILE blocks, or src is bad. Caller holds ip->lock.
int
writei(struct inode *ip, int user_src, uint64 src, uint off, uint n)
{
  uint tot, m, addr;
  struct buf *bp;

  if(ip->corrupt || off > ip->size || off + n < off)
    return -1;
  if((uint64)off + n > (uint64)MAXFILE*BSIZE)
    return -1;

  for(tot = 0; tot < n; tot += m, off += m, src += m){
    if((addr = bmap(ip, off/BSIZE, 1)) == 0)
      break;
    bp = bread(ip->dev, addr);
    m = min(n - tot, BSIZE - off%BSIZE);
    if(either_copyin(bp->data + (off % BSIZE), user_src, src, m) == -1){
      brelse(bp);
      if(tot == 0)
        return -1;
      break;
    }
    log_write(bp);
    brelse(bp);
  }

  if(off > ip->size)
    ip->size = off;
  // bmap() may have changed ip->addrs even if size did not change
  iupdate(ip);
  return tot;
}

// ---------------------------------------------------------------- directories

// Look name up in directory dp; set *poff to the entry's offset if poff.
// Returns the inode unlocked and referenced, or 0. An entry naming an
// inode number the disk does not have is never followed.
struct inode*
dirlookup(struct inode *dp, char *name, uint *poff)
{
  uint off, inum;
  struct dirent de;

  if(dp->type != T_DIR)
    return 0;

  for(off = 0; off + sizeof(de) <= dp->size; off += sizeof(de)){
    if(readi(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
      return 0;         // a hole the disk could not give us
    if(de.inum == 0 || de.inum >= sb.ninodes)
      continue;
    if(namecmp(name, de.name) == 0){
      if(poff)
        *poff = off;
      inum = de.inum;
      return iget(dp->dev, inum);
    }
  }
  return 0;
}

// Add entry (name, inum) to directory dp. Returns 0, or -1 if the name
// exists or the directory cannot grow.
int
dirlink(struct inode *dp, char *name, uint inum)
{
  int off;
  struct dirent de;
  struct inode *ip;

  if((ip = dirlookup(dp, name, 0)) != 0){
    iput(ip);
    return -1;
  }

  // a free slot, or the end
  for(off = 0; off + sizeof(de) <= dp->size; off += sizeof(de)){
    if(readi(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
      return -1;
    if(de.inum == 0)
      break;
  }

  memset(&de, 0, sizeof(de));
  strncpy(de.name, name, DIRSIZ);
  de.inum = inum;
  if(writei(dp, 0, (uint64)&de, off, sizeof(de)) != sizeof(de))
    return -1;
  return 0;
}

// ---------------------------------------------------------------- path names

// skipelem() and namecmp(), the parts without inodes, are in path.c.

// The inode for path, or with nameiparent set, the inode of its parent
// directory (the last element is copied into name, DIRSIZ bytes).
static struct inode*
namex(char *path, int nameiparent, char *name)
{
  struct inode *ip, *next;

  if(*path == '/')
    ip = iget(ROOTDEV, ROOTINO);
  else
    ip = idup(myproc()->cwd);

  while((path = skipelem(path, name)) != 0){
    ilock(ip);
    if(ip->type != T_DIR){
      iunlockput(ip);
      return 0;
    }
    if(nameiparent && *path == '\0'){
      // stop one level early
      iunlock(ip);
      return ip;
    }
    if((next = dirlookup(ip, name, 0)) == 0){
      iunlockput(ip);
      return 0;
    }
    iunlockput(ip);
    ip = next;
  }
  if(nameiparent){
    iput(ip);
    return 0;
  }
  return ip;
}

struct inode*
namei(char *path)
{
  char name[DIRSIZ];

  return namex(path, 0, name);
}

struct inode*
nameiparent(char *path, char *name)
{
  return namex(path, 1, name);
}
