// file.c: open files, shared by descriptors (dup, fork) with a reference
// count, and the device switch.

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "fs.h"
#include "spinlock.h"
#include "sleeplock.h"
#include "file.h"
#include "stat.h"
#include "procinfo.h"
#include "proc.h"

struct devsw devsw[NDEV];

static struct {
  struct spinlock lock;
  struct file file[NFILE];
} ftable;

void
fileinit(void)
{
  initlock(&ftable.lock, "ftable");
}

// A free file structure with one reference, or 0 if all are in use.
struct file*
filealloc(void)
{
  struct file *f;

  acquire(&ftable.lock);
  for(f = ftable.file; f < ftable.file + NFILE; f++){
    if(f->ref == 0){
      f->ref = 1;
      release(&ftable.lock);
      return f;
    }
  }
  release(&ftable.lock);
  return 0;
}

// One more reference to f.
struct file*
filedup(struct file *f)
{
  acquire(&ftable.lock);
  if(f->ref < 1)
    panic("filedup: free file");
  f->ref++;
  release(&ftable.lock);
  return f;
}

// Drop a reference; the last one closes the pipe end or inode.
void
fileclose(struct file *f)
{
  struct file ff;

  acquire(&ftable.lock);
  if(f->ref < 1)
    panic("fileclose: free file");
  if(--f->ref > 0){
    release(&ftable.lock);
    return;
  }
  ff = *f;
  f->ref = 0;
  f->type = FD_NONE;
  release(&ftable.lock);

  if(ff.type == FD_PIPE)
    pipeclose(ff.pipe, ff.writable);
  else if(ff.type == FD_INODE || ff.type == FD_DEVICE){
    begin_op();         // the last reference to an unlinked file frees it
    iput(ff.ip);
    end_op();
  }
}

// Copy f's metadata to user address addr (a struct stat).
// Returns 0, or -1 if f is not an inode or addr is bad.
int
filestat(struct file *f, uint64 addr)
{
  struct proc *p = myproc();
  struct stat st;

  if(f->type != FD_INODE && f->type != FD_DEVICE)
    return -1;
  ilock(f->ip);
  stati(f->ip, &st);
  iunlock(f->ip);
  if(copyout(p->pagetable, addr, (char *)&st, sizeof(st)) < 0)
    return -1;
  return 0;
}

// Read up to n bytes into user address addr. Returns the count, 0 at end
// of file, or -1.
int
fileread(struct file *f, uint64 addr, int n)
{
  int r = 0;

  if(f->readable == 0)
    return -1;

  if(f->type == FD_PIPE){
    r = piperead(f->pipe, addr, n);
  } else if(f->type == FD_DEVICE){
    if(f->major < 0 || f->major >= NDEV || !devsw[f->major].read)
      return -1;
    r = devsw[f->major].read(1, addr, n);
  } else if(f->type == FD_INODE){
    ilock(f->ip);
    if((r = readi(f->ip, 1, addr, f->off, n)) > 0)
      f->off += r;
    iunlock(f->ip);
  } else {
    panic("fileread: bad type %d", f->type);
  }
  return r;
}

// Bytes of one write() per log operation: a chunk touches at most
// WRITECHUNK/BSIZE + 1 data blocks, 3 indirect blocks (the single, and the
// double with one of its middle ones), 2 bitmap blocks and the inode, all
// of which must fit in MAXOPBLOCKS.
#define WRITECHUNK ((MAXOPBLOCKS - 1 - 3 - 2 - 1) * BSIZE)

// Write n bytes from user address addr, in log operations of at most
// WRITECHUNK bytes each (a crash may keep a prefix of a long write).
// Returns n, or -1 if not all of it could be written.
int
filewrite(struct file *f, uint64 addr, int n)
{
  int r, i, n1;

  if(f->writable == 0)
    return -1;

  if(f->type == FD_PIPE){
    return pipewrite(f->pipe, addr, n);
  } else if(f->type == FD_DEVICE){
    if(f->major < 0 || f->major >= NDEV || !devsw[f->major].write)
      return -1;
    return devsw[f->major].write(1, addr, n);
  } else if(f->type == FD_INODE){
    for(i = 0; i < n; i += r){
      n1 = n - i < WRITECHUNK ? n - i : WRITECHUNK;
      begin_op();
      ilock(f->ip);
      if((r = writei(f->ip, 1, addr + i, f->off, n1)) > 0)
        f->off += r;
      iunlock(f->ip);
      end_op();
      if(r != n1)
        return -1;      // the disk is full, or addr is bad
    }
    return n;
  }
  panic("filewrite: bad type %d", f->type);
}
