// vm.c: Sv39 page tables: the kernel's, and each process's user memory.
//
// The kernel page table maps RAM and the devices at their physical
// addresses (2 MiB pages where alignment allows), plus the trampoline and
// the kernel stacks at the top (vmlayout.h). User page tables are built
// from 4 KiB pages only. The kernel never dereferences a user address:
// copyin/copyout walk the user table in software and refuse anything that
// is unmapped, not PTE_U, or (for writes) not PTE_W, so a bad user pointer
// becomes -1, never a kernel fault.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "vmlayout.h"
#include "elf.h"
#include "riscv.h"
#include "defs.h"

pagetable_t kernel_pagetable;

extern char etext[];            // kernel.ld: end of kernel text
extern char trampoline[];       // trampoline.S

// Build the kernel page table.
static pagetable_t
kvmmake(void)
{
  pagetable_t kpgtbl;

  if((kpgtbl = (pagetable_t)kalloc()) == 0)
    panic("kvmmake: out of memory");
  memset(kpgtbl, 0, PGSIZE);

  kvmmap(kpgtbl, BOOTINFO, BOOTINFO, PGSIZE, PTE_R);
  kvmmap(kpgtbl, POWER, POWER, PGSIZE, PTE_R | PTE_W);
  kvmmap(kpgtbl, HARTCTL, HARTCTL, PGSIZE, PTE_R | PTE_W);
  kvmmap(kpgtbl, SSWI, SSWI, 0x4000, PTE_R | PTE_W);
  kvmmap(kpgtbl, CLINT, CLINT, 0x10000, PTE_R | PTE_W);
  kvmmap(kpgtbl, PLIC, PLIC, 0x400000, PTE_R | PTE_W);
  kvmmap(kpgtbl, UART0, UART0, PGSIZE, PTE_R | PTE_W);
  kvmmap(kpgtbl, VIRTIO0, VIRTIO0, PGSIZE, PTE_R | PTE_W);
  kvmmap(kpgtbl, VIRTIO1, VIRTIO1, PGSIZE, PTE_R | PTE_W);

  // kernel text: executable and read-only
  kvmmap(kpgtbl, KERNBASE, KERNBASE, (uint64)etext - KERNBASE, PTE_R | PTE_X);
  // kernel data and all the RAM after it
  kvmmap(kpgtbl, (uint64)etext, (uint64)etext, phystop - (uint64)etext,
         PTE_R | PTE_W);

  kvmmap(kpgtbl, TRAMPOLINE, (uint64)trampoline, PGSIZE, PTE_R | PTE_X);
  proc_mapstacks(kpgtbl);
  return kpgtbl;
}

void
kvminit(void)
{
  kernel_pagetable = kvmmake();
}

// Turn paging on with the kernel page table.
void
kvminithart(void)
{
  sfence_vma();
  w_satp(MAKE_SATP(kernel_pagetable));
  sfence_vma();
}

// The PTE for va at the given level (0 = 4 KiB leaf, 1 = 2 MiB leaf),
// creating page-table pages on the way if alloc. Returns 0 if a page-table
// page is missing (and !alloc) or cannot be allocated.
static pte_t*
walklevel(pagetable_t pagetable, uint64 va, int alloc, int leaflevel)
{
  int level;
  pte_t *pte;

  if(va >= MAXVA)
    panic("walk: va 0x%lx out of range", va);
  for(level = 2; level > leaflevel; level--){
    pte = &pagetable[PX(level, va)];
    if(*pte & PTE_V){
      if(PTE_LEAF(*pte))
        panic("walk: va 0x%lx is inside a superpage", va);
      pagetable = (pagetable_t)PTE2PA(*pte);
    } else {
      if(!alloc || (pagetable = (pagetable_t)kalloc()) == 0)
        return 0;
      memset(pagetable, 0, PGSIZE);
      *pte = PA2PTE(pagetable) | PTE_V;
    }
  }
  return &pagetable[PX(leaflevel, va)];
}

// The level-0 PTE for va (see walklevel).
pte_t*
walk(pagetable_t pagetable, uint64 va, int alloc)
{
  return walklevel(pagetable, va, alloc, 0);
}

// The physical address of user page va, or 0 if va is not a mapped user
// page. Safe for any va a user supplies.
uint64
walkaddr(pagetable_t pagetable, uint64 va)
{
  pte_t *pte;

  if(va >= MAXVA)
    return 0;
  pte = walk(pagetable, va, 0);
  if(pte == 0 || (*pte & PTE_V) == 0 || (*pte & PTE_U) == 0)
    return 0;
  return PTE2PA(*pte);
}

// Map [va, va+sz) to [pa, pa+sz) in the kernel page table, with 2 MiB
// pages wherever va and pa are both 2 MiB aligned. Boot only.
void
kvmmap(pagetable_t kpgtbl, uint64 va, uint64 pa, uint64 sz, int perm)
{
  pte_t *pte;
  uint64 end = va + sz;

  if((va % PGSIZE) != 0 || (pa % PGSIZE) != 0 || (sz % PGSIZE) != 0)
    panic("kvmmap: unaligned 0x%lx", va);
  while(va < end){
    if(va % MEGAPAGE == 0 && pa % MEGAPAGE == 0 && end - va >= MEGAPAGE){
      if((pte = walklevel(kpgtbl, va, 1, 1)) == 0)
        panic("kvmmap: out of memory");
      if(*pte & PTE_V)
        panic("kvmmap: remap 0x%lx", va);
      *pte = PA2PTE(pa) | perm | PTE_V | PTE_A | PTE_D;
      va += MEGAPAGE;
      pa += MEGAPAGE;
    } else {
      if(mappages(kpgtbl, va, PGSIZE, pa, perm) != 0)
        panic("kvmmap: out of memory");
      va += PGSIZE;
      pa += PGSIZE;
    }
  }
}

// Map [va, va+size) to physical [pa, pa+size) with 4 KiB pages. va and
// size must be page-aligned. Returns 0, or -1 if a page-table page cannot
// be allocated (pages mapped so far stay mapped).
int
mappages(pagetable_t pagetable, uint64 va, uint64 size, uint64 pa, int perm)
{
  uint64 a, last;
  pte_t *pte;

  if((va % PGSIZE) != 0 || (size % PGSIZE) != 0 || size == 0)
    panic("mappages: unaligned or empty 0x%lx+0x%lx", va, size);
  a = va;
  last = va + size - PGSIZE;
  for(;;){
    if((pte = walk(pagetable, a, 1)) == 0)
      return -1;
    if(*pte & PTE_V)
      panic("mappages: remap 0x%lx", a);
    // A and D preset: the hardware need not update them
    *pte = PA2PTE(pa) | perm | PTE_V | PTE_A | PTE_D;
    if(a == last)
      break;
    a += PGSIZE;
    pa += PGSIZE;
  }
  return 0;
}

// Remove npages of mappings from va (page-aligned), freeing the physical
// pages if do_free. Pages that are not mapped are skipped (exec may leave
// the first pages of an address space unmapped).
void
uvmunmap(pagetable_t pagetable, uint64 va, uint64 npages, int do_free)
{
  uint64 a, pa;
  pte_t *pte;
  int removed = 0;

  if((va % PGSIZE) != 0)
    panic("uvmunmap: unaligned 0x%lx", va);
  for(a = va; a < va + npages*PGSIZE; a += PGSIZE){
    if((pte = walk(pagetable, a, 0)) == 0)
      continue;
    if((*pte & PTE_V) == 0){
      *pte = 0;   // a page reserved by uvmlazy, never touched: no translation
      continue;
    }
    if(!PTE_LEAF(*pte))
      panic("uvmunmap: not a leaf at 0x%lx", a);
    pa = PTE2PA(*pte);
    if(do_free && !kunshare((void*)pa)){   // its last mapping (kalloc.c)
      if(*pte & PTE_X)
        icache_code_freed(pa);   // before kfree: nobody can refill it yet
      kfree((void*)pa);
    }
    *pte = 0;
    removed = 1;
  }
  if(removed)
    tlb_unmapped();   // harts may still hold the translations (tlb.c)
}

// An empty user page table, or 0 when out of memory.
pagetable_t
uvmcreate(void)
{
  pagetable_t pagetable;

  if((pagetable = (pagetable_t)kalloc()) == 0)
    return 0;
  memset(pagetable, 0, PGSIZE);
  return pagetable;
}

// Grow user memory from oldsz to newsz bytes with zeroed pages mapped
// readable, user-accessible and xperm. Returns newsz, or 0 on failure
// (with everything it allocated freed again).
uint64
uvmalloc(pagetable_t pagetable, uint64 oldsz, uint64 newsz, int xperm)
{
  char *mem;
  uint64 a;

  if(newsz < oldsz)
    return oldsz;
  if(newsz > TRAPFRAME)
    return 0;
  for(a = PGROUNDUP(oldsz); a < newsz; a += PGSIZE){
    if((mem = kalloc()) == 0){
      uvmdealloc(pagetable, a, oldsz);
      return 0;
    }
    memset(mem, 0, PGSIZE);
    if(mappages(pagetable, a, PGSIZE, (uint64)mem,
                PTE_R | PTE_U | xperm) != 0){
      kfree(mem);
      uvmdealloc(pagetable, a, oldsz);
      return 0;
    }
  }
  return newsz;
}

// Shrink user memory from oldsz to newsz bytes. Returns the new size.
uint64
uvmdealloc(pagetable_t pagetable, uint64 oldsz, uint64 newsz)
{
  if(newsz >= oldsz)
    return oldsz;
  if(PGROUNDUP(newsz) < PGROUNDUP(oldsz)){
    uint64 npages = (PGROUNDUP(oldsz) - PGROUNDUP(newsz)) / PGSIZE;
    uvmunmap(pagetable, PGROUNDUP(newsz), npages, 1);
  }
  return newsz;
}

// Free the page-table pages; every leaf must already be unmapped.
static void
freewalk(pagetable_t pagetable)
{
  int i;
  pte_t pte;

  for(i = 0; i < 512; i++){
    // most entries are empty: skip eight at a time (each loop turn costs
    // the emulator more than the loads in it)
    if(i % 8 == 0 && (pagetable[i] | pagetable[i+1] | pagetable[i+2] |
                      pagetable[i+3] | pagetable[i+4] | pagetable[i+5] |
                      pagetable[i+6] | pagetable[i+7]) == 0){
      i += 7;
      continue;
    }
    pte = pagetable[i];
    if((pte & PTE_V) && !PTE_LEAF(pte)){
      freewalk((pagetable_t)PTE2PA(pte));
      pagetable[i] = 0;
    } else if(pte & PTE_V){
      panic("freewalk: leaf left at index %d", i);
    }
  }
  kfree((void*)pagetable);
}

// Free sz bytes of user memory, then the page table itself.
void
uvmfree(pagetable_t pagetable, uint64 sz)
{
  if(sz > 0)
    uvmunmap(pagetable, 0, PGROUNDUP(sz)/PGSIZE, 1);
  freewalk(pagetable);
  tlb_unmapped();   // a new table may get this one's address (tlb.c)
}

// Copy a parent's user memory (sz bytes, page table and contents) into a
// child's page table. Returns 0, or -1 (child memory freed again) when out
// of memory.
int
uvmcopy(pagetable_t old, pagetable_t new, uint64 sz)
{
  pte_t *pte;
  uint64 pa, i;
  char *mem;

  for(i = 0; i < sz; i += PGSIZE){
    if((pte = walk(old, i, 0)) == 0)
      continue;
    if((*pte & PTE_V) == 0){
      // still reserved in the parent: reserved in the child, not copied
      if((*pte & PTE_LAZY) &&
         uvmlazy(new, i, PGSIZE, PTE_FLAGS(*pte) & ~PTE_LAZY) < 0)
        goto err;
      continue;
    }
    pa = PTE2PA(*pte);
    if((*pte & (PTE_U | PTE_W)) == PTE_U){
      // read-only user memory (text): nobody ever writes it (copyout
      // needs PTE_W), so the child shares the page (kalloc.c)
      if(mappages(new, i, PGSIZE, pa, PTE_FLAGS(*pte)) != 0)
        goto err;
      kshare((void*)pa);
      continue;
    }
    if((mem = kalloc()) == 0)
      goto err;
    memmove(mem, (char*)pa, PGSIZE);
    if(mappages(new, i, PGSIZE, (uint64)mem, PTE_FLAGS(*pte)) != 0){
      kfree(mem);
      goto err;
    }
  }
  return 0;

err:
  uvmunmap(new, 0, i / PGSIZE, 1);
  return -1;
}

// Reserve [va, va+size) (page-aligned) for user pages with permissions
// perm that are allocated, zeroed, when first touched (uvmfault, useraddr).
// For the user stack: most programs use a page or two of it, and fork
// would copy (and exit free) every page mapped. Returns 0, or -1 if a
// page-table page cannot be allocated.
int
uvmlazy(pagetable_t pagetable, uint64 va, uint64 size, int perm)
{
  uint64 a;
  pte_t *pte;

  for(a = va; a < va + size; a += PGSIZE){
    if((pte = walk(pagetable, a, 1)) == 0)
      return -1;
    if(*pte & PTE_V)
      panic("uvmlazy: 0x%lx is mapped", a);
    *pte = PTE_LAZY | perm;
  }
  return 0;
}

// Give the reserved page behind pte its zeroed page. 0, or -1 when out of
// memory. (Invalid -> valid: no TLB flush needed, see tlb.c.)
static int
lazyfill(pte_t *pte)
{
  char *mem;

  if((mem = kalloc()) == 0)
    return -1;
  memset(mem, 0, PGSIZE);
  *pte = PA2PTE(mem) | (PTE_FLAGS(*pte) & ~PTE_LAZY) | PTE_V | PTE_A | PTE_D;
  return 0;
}

// A page fault at user address va: if va is in a reserved page, allocate
// it and return 0 (the instruction runs again); -2 if there is no memory
// for it; -1 if va is not a reserved page.
int
uvmfault(pagetable_t pagetable, uint64 va)
{
  pte_t *pte;

  if(va >= MAXVA)
    return -1;
  pte = walk(pagetable, PGROUNDDOWN(va), 0);
  if(pte == 0 || (*pte & (PTE_V | PTE_LAZY)) != PTE_LAZY)
    return -1;
  return lazyfill(pte) < 0 ? -2 : 0;
}

// Make user page va inaccessible from user mode (the stack guard page).
void
uvmclear(pagetable_t pagetable, uint64 va)
{
  pte_t *pte;

  if((pte = walk(pagetable, va, 0)) == 0)
    panic("uvmclear: 0x%lx not mapped", va);
  *pte &= ~PTE_U;
  tlb_unmapped();   // a permission lost (tlb.c)
}

// Add perm to the PTE of mapped user page va (exec: a page shared by two
// ELF segments gets both segments' permissions).
void
uvmaddperm(pagetable_t pagetable, uint64 va, int perm)
{
  pte_t *pte;

  if((pte = walk(pagetable, va, 0)) == 0 || (*pte & PTE_V) == 0)
    panic("uvmaddperm: 0x%lx not mapped", va);
  *pte |= perm;
}

// The physical address behind user address va if the page is user
// accessible (and writable when write), else 0.
static uint64
useraddr(pagetable_t pagetable, uint64 va, int write)
{
  pte_t *pte;

  if(va >= MAXVA)
    return 0;
  pte = walk(pagetable, PGROUNDDOWN(va), 0);
  if(pte && (*pte & (PTE_V | PTE_LAZY)) == PTE_LAZY && lazyfill(pte) < 0)
    return 0;   // reserved, and no memory to fill it
  if(pte == 0 || (*pte & (PTE_V | PTE_U)) != (PTE_V | PTE_U))
    return 0;
  if(write && (*pte & PTE_W) == 0)
    return 0;
  return PTE2PA(*pte) + (va - PGROUNDDOWN(va));
}

// Is all of [va, va+len) user memory (writable too, if write)?
// Returns 0 if so, -1 if not (or if the range wraps).
int
uvmcheck(pagetable_t pagetable, uint64 va, uint64 len, int write)
{
  uint64 a;

  if(len == 0)
    return 0;
  if(va + len < va || va + len > MAXVA)
    return -1;
  for(a = PGROUNDDOWN(va); a < va + len; a += PGSIZE)
    if(useraddr(pagetable, a, write) == 0)
      return -1;
  return 0;
}

// Copy len bytes from kernel src to user dstva.
// Returns 0, or -1 if any byte of the destination is not writable user
// memory (some bytes may have been copied by then).
int
copyout(pagetable_t pagetable, uint64 dstva, char *src, uint64 len)
{
  uint64 n, pa;

  while(len > 0){
    if((pa = useraddr(pagetable, dstva, 1)) == 0)
      return -1;
    n = PGSIZE - (dstva % PGSIZE);
    if(n > len)
      n = len;
    memmove((void*)pa, src, n);
    len -= n;
    src += n;
    dstva += n;
  }
  return 0;
}

// Copy len bytes from user srcva to kernel dst.
// Returns 0, or -1 if any byte of the source is not user memory.
int
copyin(pagetable_t pagetable, char *dst, uint64 srcva, uint64 len)
{
  uint64 n, pa;

  while(len > 0){
    if((pa = useraddr(pagetable, srcva, 0)) == 0)
      return -1;
    n = PGSIZE - (srcva % PGSIZE);
    if(n > len)
      n = len;
    memmove(dst, (void*)pa, n);
    len -= n;
    dst += n;
    srcva += n;
  }
  return 0;
}

// Copy a NUL-terminated string of at most max bytes (NUL included) from
// user srcva to kernel dst. Returns 0, or -1 if the string is unreadable
// or has no NUL within max bytes.
int
copyinstr(pagetable_t pagetable, char *dst, uint64 srcva, uint64 max)
{
  uint64 n, pa;
  char *p;

  while(max > 0){
    if((pa = useraddr(pagetable, srcva, 0)) == 0)
      return -1;
    n = PGSIZE - (srcva % PGSIZE);
    if(n > max)
      n = max;
    p = (char *)pa;
    while(n > 0){
      if(*p == 0){
        *dst = 0;
        return 0;
      }
      *dst++ = *p++;
      n--;
      max--;
      srcva++;
    }
  }
  return -1;
}
