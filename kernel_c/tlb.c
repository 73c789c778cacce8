// tlb.c: when a hart must flush its TLB (sfence.vma) on the way to user space.
//
// xv6 fences twice per trap, as trampoline.S switches satp in and out. In
// the emulator each sfence.vma is a full TLB flush that also empties the
// translated-code jump cache, the larger part of a system call's cost. So
// trampoline.S only writes satp, and usertrapret() calls tlb_enter() to
// fence only when a translation this hart may hold has gone stale.
//
// What a hart's TLB can hold. All our tables use ASID 0. The emulated TLB
// (QEMU's, which Unicorn is) keeps separate entries per privilege mode, and
// a satp write with an unchanged ASID flushes nothing. So:
//   - U-mode entries, made while a process ran: of its user table, for user
//     memory only (PTE_U leaves; nothing else is usable from U-mode).
//   - S-mode entries made under a user table: only trampoline.S's, in
//     uservec before its satp write and in userret after it: TRAMPOLINE
//     (the same physical page in every table, so never stale) and TRAPFRAME
//     (a different page per process: the real hazard; a stale one makes
//     uservec save one process's registers into another's trapframe).
//   - S-mode entries made under the kernel table. That table is built at
//     boot and never changes (kvmmap is boot only), so they never go stale;
//     it does not map TRAPFRAME (vmlayout.h), so none of them can stand in
//     for the trapframe while userret runs under a user table, and the
//     kernel never uses a user VA through the MMU (copyin/copyout walk the
//     table in software), so U-mode entries are never used for it.
// Hence, returning to user table T is safe without a fence iff every entry
// this hart holds from user tables is of T and still matches T's PTEs:
//   - this hart's last user table was T (c->usatp), and
//   - no user PTE anywhere was removed or lost permissions, and no page
//     table was freed, since this hart's last fence (c->tlbgen == tlbgen).
//     A freed table matters because a new one may get its address: the
//     same satp would then name other mappings.
// New mappings (invalid -> valid, as sbrk growth or a reserved stack
// page's first touch, vm.c uvmlazy; or more permissions) need no fence: a
// failed walk is never cached, and a missing permission misses the entry.
// The generation is global because entries outlive migration: a hart that
// ran a process long ago may run it again after another hart shrank it.
// Who bumps it (tlb_unmapped): uvmunmap (sbrk shrink, exit/wait freeing a
// process, exec freeing the old image, fork's error path), uvmclear (exec's
// guard page) and uvmfree (freeing a table). Those cover exit, kill (the
// victim exits itself), exec (a new table: c->usatp differs too) and fork
// (the child's new table). A process's table changes only on the hart
// running it, or after it has died, so no table changes between this
// check and the sret that uses it.
//
// On hardware without per-mode TLB entries this would not be enough: user
// VAs overlap the kernel's device and RAM mappings (user text starts at
// 0x1000, where BOOTINFO is), so a real port would fence on every satp
// switch or give the kernel global (G) mappings and each process an ASID.
//
// fence.i (icache.c) is independent of this: it concerns translated code,
// keyed by physical page, not the TLB.

#include "types.h"
#include "param.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "racy.h"
#include "defs.h"

static volatile uint64 tlbgen;   // bumped when user translations go stale
DATA_RACE_OK(tlbgen, "a generation: bumped only by AMO, read as a snapshot; a bump after the read makes the next entry fence");

// A user PTE was removed or downgraded, or a user page table freed: every
// hart fences before it next enters user space.
void
tlb_unmapped(void)
{
  __sync_fetch_and_add(&tlbgen, 1);
}

// About to enter user space with satp: flush this hart's TLB if it may hold
// a translation that satp's table no longer has. Interrupts are off.
void
tlb_enter(uint64 satp)
{
  struct cpu *c = mycpu();
  uint64 g = tlbgen;

  if(c->usatp != satp || c->tlbgen != g){
    c->usatp = satp;
    c->tlbgen = g;   // read before the fence: a later bump fences again
    sfence_vma();
  }
}
