// pipe.c: pipes, a PIPESIZE-byte ring buffer between a write end and a
// read end. Readers sleep while it is empty, writers while it is full;
// both give up with -1 when killed.

#include "types.h"
#include "riscv.h"
#include "defs.h"
#include "param.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "fs.h"
#include "sleeplock.h"
#include "file.h"

struct pipe {
  struct spinlock lock;
  char data[PIPESIZE];
  uint nread;           // bytes read so far
  uint nwrite;          // bytes written so far
  int readopen;         // read end still open
  int writeopen;        // write end still open
};

_Static_assert(sizeof(struct pipe) <= PGSIZE, "struct pipe must fit a page");

// Make a pipe and a file for each end. Returns 0, or -1 when out of
// files or memory.
int
pipealloc(struct file **f0, struct file **f1)
{
  struct pipe *pi = 0;

  *f0 = *f1 = 0;
  if((*f0 = filealloc()) == 0 || (*f1 = filealloc()) == 0)
    goto bad;
  if((pi = (struct pipe*)kalloc()) == 0)
    goto bad;
  pi->readopen = 1;
  pi->writeopen = 1;
  pi->nwrite = 0;
  pi->nread = 0;
  initlock(&pi->lock, "pipe");
  (*f0)->type = FD_PIPE;
  (*f0)->readable = 1;
  (*f0)->writable = 0;
  (*f0)->pipe = pi;
  (*f1)->type = FD_PIPE;
  (*f1)->readable = 0;
  (*f1)->writable = 1;
  (*f1)->pipe = pi;
  return 0;

bad:
  if(*f0)
    fileclose(*f0);
  if(*f1)
    fileclose(*f1);
  return -1;
}

void
pipeclose(struct pipe *pi, int writable)
{
  acquire(&pi->lock);
  if(writable){
    pi->writeopen = 0;
    wakeup(&pi->nread);
  } else {
    pi->readopen = 0;
    wakeup(&pi->nwrite);
  }
  if(pi->readopen == 0 && pi->writeopen == 0){
    release(&pi->lock);
    kfree((char*)pi);
  } else
    release(&pi->lock);
}

// Write n bytes from user address addr, sleeping while the pipe is full.
// Returns n, or -1 if the read end is closed, the process is killed, or
// addr is bad.
int
pipewrite(struct pipe *pi, uint64 addr, int n)
{
  int i = 0, m;
  uint at;
  struct proc *pr = myproc();

  acquire(&pi->lock);
  while(i < n){
    if(pi->readopen == 0 || killed(pr)){
      release(&pi->lock);
      return -1;
    }
    if(pi->nwrite == pi->nread + PIPESIZE){
      wakeup(&pi->nread);
      sleep(&pi->nwrite, &pi->lock);
      continue;
    }
    // as much as fits before the buffer wraps or fills
    at = pi->nwrite % PIPESIZE;
    m = n - i;
    if(m > PIPESIZE - at)
      m = PIPESIZE - at;
    if(m > pi->nread + PIPESIZE - pi->nwrite)
      m = pi->nread + PIPESIZE - pi->nwrite;
    if(copyin(pr->pagetable, &pi->data[at], addr + i, m) == -1){
      release(&pi->lock);
      return -1;
    }
    pi->nwrite += m;
    i += m;
  }
  wakeup(&pi->nread);
  release(&pi->lock);
  return i;
}

// Read up to n bytes into user address addr, sleeping while the pipe is
// empty and a writer exists. Returns the count, 0 at end of file, or -1.
int
piperead(struct pipe *pi, uint64 addr, int n)
{
  int i = 0, m;
  uint at;
  struct proc *pr = myproc();

  acquire(&pi->lock);
  while(pi->nread == pi->nwrite && pi->writeopen){
    if(killed(pr)){
      release(&pi->lock);
      return -1;
    }
    sleep(&pi->nread, &pi->lock);
  }
  while(i < n && pi->nread != pi->nwrite){
    at = pi->nread % PIPESIZE;
    m = n - i;
    if(m > PIPESIZE - at)
      m = PIPESIZE - at;
    if(m > pi->nwrite - pi->nread)
      m = pi->nwrite - pi->nread;
    if(copyout(pr->pagetable, addr + i, &pi->data[at], m) == -1){
      if(i == 0){
        release(&pi->lock);
        return -1;
      }
      break;
    }
    pi->nread += m;
    i += m;
  }
  wakeup(&pi->nwrite);
  release(&pi->lock);
  return i;
}
