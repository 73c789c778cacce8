// kalloc.c: the physical page allocator.
//
// All RAM from the end of the kernel image to PHYSTOP (bootinfo's RAM size)
// is handed out in 4096-byte pages. Pages that were never allocated are
// taken from the bottom of [fresh, PHYSTOP) by bumping a pointer; freed
// pages go on a free list and are reused first. Boot therefore touches no
// page it does not use: threading every page onto a list at boot costs
// tens of milliseconds of host page faults under emulation.
//
// nfree counts free pages (list and fresh) for freemem() and the usertests
// leak check.

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
  struct run *freelist; // pages freed since boot
  uint64 fresh;         // [fresh, phystop) has never been allocated
  uint64 nfree;         // free pages: the list plus the fresh region
  uint64 ntotal;        // pages managed
} kmem;

void
kinit(void)
{
  initlock(&kmem.lock, "kmem");
  kmem.fresh = PGROUNDUP((uint64)end);
  kmem.ntotal = (phystop - kmem.fresh) / PGSIZE;
  kmem.nfree = kmem.ntotal;
}

// Free the page at physical address pa, which kalloc() returned.
// Fill it with junk so a dangling reference shows up quickly.
void
kfree(void *pa)
{
  struct run *r = (struct run*)pa;

  if(((uint64)pa % PGSIZE) != 0 || (char*)pa < end ||
     (uint64)pa >= kmem.fresh)
    panic("kfree: bad page 0x%lx", (uint64)pa);
  memset(pa, 1, PGSIZE);
  acquire(&kmem.lock);
  r->next = kmem.freelist;
  kmem.freelist = r;
  kmem.nfree++;
  release(&kmem.lock);
}

// Allocate one 4096-byte page, or return 0 when memory is exhausted.
// The contents are junk (kfree's fill, or zeros for a fresh page);
// callers clear what they need.
void*
kalloc(void)
{
  struct run *r;

  acquire(&kmem.lock);
  if((r = kmem.freelist) != 0){
    kmem.freelist = r->next;
    kmem.nfree--;
  } else if(kmem.fresh + PGSIZE <= phystop){
    r = (struct run*)kmem.fresh;
    kmem.fresh += PGSIZE;
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
