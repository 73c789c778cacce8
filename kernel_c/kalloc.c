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
//
// Each page has a reference count: 1 from kalloc, more while fork shares a
// read-only user page (program text) between parent and child instead of
// copying it (vm.c, uvmcopy). A copy would cost the emulator the copy and a
// fresh translation of the child's code, and exit would free it as code,
// which makes every hart drop its translations of it (icache.c).

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "defs.h"

extern char end[];      // first address after the kernel; kernel.ld

_Static_assert(NPROC < 256, "page reference counts are bytes");

struct run {
  struct run *next;
};

static struct {
  struct spinlock lock;
  struct run *freelist; // pages freed since boot
  uint64 fresh;         // [fresh, phystop) has never been allocated
  uint64 nfree;         // free pages: the list plus the fresh region
  uint64 base;          // first page managed (the counts live there)
  uint64 first;         // first page handed out
  uchar *refs;          // references per page from base (kalloc sets 1;
                        // at most one per process: NPROC < 256)
  uint64 ntotal;        // pages managed
} kmem;

void
kinit(void)
{
  uint64 npages;

  initlock(&kmem.lock, "kmem");
  kmem.base = PGROUNDUP((uint64)end);
  npages = (phystop - kmem.base) / PGSIZE;
  // the counts take the first pages (never initialised: kalloc sets one)
  kmem.refs = (uchar*)kmem.base;
  kmem.first = kmem.base + PGROUNDUP(npages);
  kmem.fresh = kmem.first;
  kmem.ntotal = (phystop - kmem.fresh) / PGSIZE;
  kmem.nfree = kmem.ntotal;
}

static uchar*
refs(void *pa)
{
  if(((uint64)pa % PGSIZE) != 0 || (uint64)pa < kmem.first ||
     (uint64)pa >= phystop)
    panic("kalloc: bad page 0x%lx", (uint64)pa);
  return &kmem.refs[((uint64)pa - kmem.base) / PGSIZE];
}

// One more user of page pa (fork sharing it).
void
kshare(void *pa)
{
  acquire(&kmem.lock);
  (*refs(pa))++;
  release(&kmem.lock);
}

// Drop a reference to pa unless it is the last: returns 1 if others still
// use the page, 0 if the caller holds the only one (and must kfree it).
int
kunshare(void *pa)
{
  uchar *r;
  int shared;

  acquire(&kmem.lock);
  r = refs(pa);
  if((shared = *r > 1) != 0)
    (*r)--;
  release(&kmem.lock);
  return shared;
}

// Free the page at physical address pa, which kalloc() returned.
// Fill it with junk so a dangling reference shows up quickly.
void
kfree(void *pa)
{
  struct run *r = (struct run*)pa;

  if(((uint64)pa % PGSIZE) != 0 || (uint64)pa < kmem.first ||
     (uint64)pa >= kmem.fresh)
    panic("kfree: bad page 0x%lx", (uint64)pa);
  // no lock needed: the caller holds the only reference
  if(*refs(pa) != 1)
    panic("kfree: page 0x%lx has %d references", (uint64)pa, *refs(pa));
  *refs(pa) = 0;
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
  if(r)
    *refs(r) = 1;
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
