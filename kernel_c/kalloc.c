// kalloc.c: the physical page allocator.
//
// All RAM from the end of the kernel image to PHYSTOP (bootinfo's RAM size)
// is kept on a free list of 4096-byte pages. nfree counts them for the
// freemem() system call and the usertests leak check.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "defs.h"

extern char end[];      // first address after the kernel; kernel.ld

struct run {
  struct run *next;
};

static struct {
  struct spinlock lock;
  struct run *freelist;
  uint64 nfree;         // pages on freelist
  uint64 ntotal;        // pages managed
} kmem;

// Put a page on the free list without touching its contents. Boot uses it
// for all of RAM: filling 128 MiB with junk would cost a noticeable part of
// the boot time under emulation.
static void
kfree_nojunk(void *pa)
{
  struct run *r = (struct run*)pa;

  acquire(&kmem.lock);
  r->next = kmem.freelist;
  kmem.freelist = r;
  kmem.nfree++;
  release(&kmem.lock);
}

void
kinit(void)
{
  char *p;

  initlock(&kmem.lock, "kmem");
  for(p = (char*)PGROUNDUP((uint64)end); p + PGSIZE <= (char*)phystop;
      p += PGSIZE){
    kfree_nojunk(p);
    kmem.ntotal++;
  }
}

// Free the page at physical address pa, which kalloc() returned.
// Fill it with junk so a dangling reference shows up quickly.
void
kfree(void *pa)
{
  if(((uint64)pa % PGSIZE) != 0 || (char*)pa < end || (uint64)pa >= phystop)
    panic("kfree: bad page 0x%lx", (uint64)pa);
  memset(pa, 1, PGSIZE);
  kfree_nojunk(pa);
}

// Allocate one 4096-byte page, or return 0 when memory is exhausted.
// The contents are junk (kfree's fill, or zeros at first use); callers
// clear what they need.
void*
kalloc(void)
{
  struct run *r;

  acquire(&kmem.lock);
  r = kmem.freelist;
  if(r){
    kmem.freelist = r->next;
    kmem.nfree--;
  }
  release(&kmem.lock);
  return (void*)r;
}

// Number of free pages.
uint64
kfreepages(void)
{
  return kmem.nfree;
}

// Number of pages the allocator manages.
uint64
ktotalpages(void)
{
  return kmem.ntotal;
}
