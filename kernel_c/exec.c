// exec.c: replace the calling process's memory with an ELF program.
//
// Each PT_LOAD segment is loaded at its p_vaddr, which need not be page
// aligned; pages below the first segment stay unmapped (so a program
// linked above 0 gets null-pointer faults). Above the last segment come a
// guard page and USERSTACK stack pages holding argv (the lower ones only
// reserved until touched: vm.c, uvmlazy). Every check on the
// file is a user error (-1), never a panic: the old image is kept until
// the new one is complete.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "vmlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"
#include "elf.h"
#include "stat.h"
#include "fs.h"
#include "sleeplock.h"
#include "file.h"

#define EM_RISCV  243
#define ET_EXEC   2
#define MAXPHNUM  64

// ELF segment flags to PTE permissions (R is implied for user pages)
static int
flags2perm(int flags)
{
  int perm = 0;

  if(flags & ELF_PROG_FLAG_X)
    perm |= PTE_X;
  if(flags & ELF_PROG_FLAG_W)
    perm |= PTE_W;
  return perm;
}

// Copy sz bytes at offset off of ip to user address va, which must be
// mapped already. Returns 0, or -1 if the file is short.
static int
loadseg(pagetable_t pagetable, uint64 va, struct inode *ip, uint off, uint sz)
{
  uint n, done;
  uint64 pa;

  for(done = 0; done < sz; done += n){
    pa = walkaddr(pagetable, PGROUNDDOWN(va + done));
    if(pa == 0)
      panic("loadseg: 0x%lx not mapped", va + done);
    n = PGSIZE - ((va + done) % PGSIZE);
    if(n > sz - done)
      n = sz - done;
    pa += (va + done) % PGSIZE;
    if(readi(ip, 0, pa, off + done, n) != n)
      return -1;
  }
  return 0;
}

// Map and load one PT_LOAD segment above *szp (the end of the previous
// one, in bytes). Returns 0 and updates *szp, or -1.
static int
loadprog(pagetable_t pagetable, struct inode *ip, struct proghdr *ph,
         uint64 *szp)
{
  uint64 sz = *szp, start, end;
  int perm = flags2perm(ph->flags);

  if(ph->memsz < ph->filesz || ph->vaddr + ph->memsz < ph->vaddr)
    return -1;
  if(ph->vaddr < sz || ph->vaddr + ph->memsz > TRAPFRAME)
    return -1;                  // overlaps the previous segment, or too high
  if(ph->off + ph->filesz < ph->off || ph->off + ph->filesz > 0xffffffffUL)
    return -1;                  // readi() offsets are 32 bits
  end = ph->vaddr + ph->memsz;
  start = PGROUNDDOWN(ph->vaddr);
  if(sz > 0 && start < PGROUNDUP(sz)){
    // first page already mapped by the previous segment
    uvmaddperm(pagetable, start, perm);
    start = PGROUNDUP(sz);
  }
  if(start < end && uvmalloc(pagetable, start, end, perm) == 0){
    *szp = start;               // what exec must free
    return -1;
  }
  *szp = end;
  if(loadseg(pagetable, ph->vaddr, ip, ph->off, ph->filesz) < 0)
    return -1;
  return 0;
}

// Push argv's strings and the argv array onto the new stack ending at
// *spp, not below stackbase. Returns argc with *spp and *argvp set, or -1.
static int
pushargs(pagetable_t pagetable, char **argv, uint64 *spp, uint64 stackbase,
         uint64 *argvp)
{
  uint64 sp = *spp, ustack[MAXARG + 1];
  int argc;

  for(argc = 0; argv[argc]; argc++){
    if(argc >= MAXARG)
      return -1;
    sp -= strlen(argv[argc]) + 1;
    sp -= sp % 16;              // riscv sp must be 16-byte aligned
    if(sp < stackbase)
      return -1;
    if(copyout(pagetable, sp, argv[argc], strlen(argv[argc]) + 1) < 0)
      return -1;
    ustack[argc] = sp;
  }
  ustack[argc] = 0;

  sp -= (argc + 1) * sizeof(uint64);
  sp -= sp % 16;
  if(sp < stackbase)
    return -1;
  if(copyout(pagetable, sp, (char *)ustack, (argc + 1) * sizeof(uint64)) < 0)
    return -1;
  *spp = sp;
  *argvp = sp;
  return argc;
}

// Run program path with argv (kernel pointers, 0-terminated). Returns
// argc, which becomes main's first argument (a0), or -1 with the caller's
// memory untouched.
int
kexec(char *path, char **argv)
{
  char *s, *last;
  int i, argc;
  uint64 sz = 0, sp, stackbase, guard, uargv, oldsz;
  struct elfhdr elf;
  struct inode *ip;
  struct proghdr ph;
  pagetable_t pagetable = 0, oldpagetable;
  struct proc *p = myproc();

  begin_op();
  if((ip = namei(path)) == 0){
    end_op();
    return -1;
  }
  ilock(ip);

  if(ip->type != T_FILE)
    goto bad;
  if(readi(ip, 0, (uint64)&elf, 0, sizeof(elf)) != sizeof(elf))
    goto bad;
  if(elf.magic != ELF_MAGIC || elf.type != ET_EXEC ||
     elf.machine != EM_RISCV || elf.phentsize != sizeof(ph) ||
     elf.phnum > MAXPHNUM)
    goto bad;

  if((pagetable = proc_pagetable(p)) == 0)
    goto bad;

  for(i = 0; i < elf.phnum; i++){
    if(readi(ip, 0, (uint64)&ph, elf.phoff + i * sizeof(ph), sizeof(ph))
       != sizeof(ph))
      goto bad;
    if(ph.type != ELF_PROG_LOAD || ph.memsz == 0)
      continue;
    if(loadprog(pagetable, ip, &ph, &sz) < 0)
      goto bad;
  }
  iunlockput(ip);
  end_op();
  ip = 0;

  // a guard page, then the stack: its top USERSTACKNOW pages now, the
  // others when first touched (uvmlazy: fork then copies only what the
  // program used)
  sz = PGROUNDUP(sz);
  if(sz + (USERSTACK + 1) * PGSIZE > TRAPFRAME)
    goto bad;
  guard = sz;
  stackbase = guard + PGSIZE;
  sz = stackbase + USERSTACK * PGSIZE;   // what bad: frees, if it comes to that
  if(uvmalloc(pagetable, guard, stackbase, PTE_W) == 0)
    goto bad;
  uvmclear(pagetable, guard);
  if(uvmlazy(pagetable, stackbase, (USERSTACK - USERSTACKNOW) * PGSIZE,
             PTE_R | PTE_W | PTE_U) < 0)
    goto bad;
  if(uvmalloc(pagetable, sz - USERSTACKNOW * PGSIZE, sz, PTE_W) == 0)
    goto bad;
  sp = sz;

  if((argc = pushargs(pagetable, argv, &sp, stackbase, &uargv)) < 0)
    goto bad;

  // the program name, for ps and fault messages
  for(last = s = path; *s; s++)
    if(*s == '/')
      last = s + 1;
  safestrcpy(p->name, last, sizeof(p->name));

  // commit to the new image
  oldpagetable = p->pagetable;
  oldsz = p->sz;
  p->pagetable = pagetable;
  p->sz = sz;
  p->heapbase = sz;
  p->trapframe->epc = elf.entry;
  p->trapframe->sp = sp;
  p->trapframe->a1 = uargv;     // main(argc, argv)
  p->ignintr = 0;
  proc_freepagetable(oldpagetable, oldsz);
  // this hart runs the new text next; any other hart it moves to fences
  // itself if its translations may be stale (icache.c)
  fence_i();
  return argc;

bad:
  if(pagetable)
    proc_freepagetable(pagetable, sz);
  if(ip){
    iunlockput(ip);
    end_op();
  }
  return -1;
}
