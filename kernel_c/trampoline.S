// trampoline.S: the switch between user and kernel address spaces.
//
// This page is mapped at TRAMPOLINE in the kernel page table and in every
// user page table (without PTE_U), so the code keeps running while satp
// changes under it. The harness delivers user traps here (stvec points at
// uservec while a process runs in U-mode). TF_* are byte offsets into
// struct trapframe (proc.h), mapped at TRAPFRAME in each user page table.

#include "riscv.h"
#include "param.h"
#include "vmlayout.h"

#define TF_KSATP   0
#define TF_KSP     8
#define TF_KTRAP  16
#define TF_KTP    32

.section trampsec
.globl trampoline
trampoline:

// A trap from U-mode. Save the user registers in the trapframe, switch to
// the kernel page table and stack, and jump to usertrap(), which never
// returns here.
.align 4
.globl uservec
uservec:
        // free a0 to address the trapframe; the user's a0 waits in sscratch
        csrw sscratch, a0
        li a0, TRAPFRAME

        sd ra, 40(a0)
        sd sp, 48(a0)
        sd gp, 56(a0)
        sd tp, 64(a0)
        sd t0, 72(a0)
        sd t1, 80(a0)
        sd t2, 88(a0)
        sd s0, 96(a0)
        sd s1, 104(a0)
        sd a1, 120(a0)
        sd a2, 128(a0)
        sd a3, 136(a0)
        sd a4, 144(a0)
        sd a5, 152(a0)
        sd a6, 160(a0)
        sd a7, 168(a0)
        sd s2, 176(a0)
        sd s3, 184(a0)
        sd s4, 192(a0)
        sd s5, 200(a0)
        sd s6, 208(a0)
        sd s7, 216(a0)
        sd s8, 224(a0)
        sd s9, 232(a0)
        sd s10, 240(a0)
        sd s11, 248(a0)
        sd t3, 256(a0)
        sd t4, 264(a0)
        sd t5, 272(a0)
        sd t6, 280(a0)
        csrr t0, sscratch
        sd t0, 112(a0)

        ld sp, TF_KSP(a0)
        ld tp, TF_KTP(a0)
        ld t0, TF_KTRAP(a0)
        ld t1, TF_KSATP(a0)

        // no sfence.vma: the kernel table has nothing a user-table entry
        // could stand in for, and usertrapret() fences when an entry of a
        // user table may be stale by the time we return (tlb.c)
        csrw satp, t1

        // end the frame-pointer chain: a backtrace stops at usertrap()
        li s0, 0
        li ra, 0
        jr t0

// Return to U-mode: usertrapret() calls userret(satp) at its TRAMPOLINE
// address with sepc and sstatus already set for the return.
.globl userret
userret:
        csrw satp, a0           // tlb_enter() fenced if needed (tlb.c)

        li a0, TRAPFRAME
        ld ra, 40(a0)
        ld sp, 48(a0)
        ld gp, 56(a0)
        ld tp, 64(a0)
        ld t0, 72(a0)
        ld t1, 80(a0)
        ld t2, 88(a0)
        ld s0, 96(a0)
        ld s1, 104(a0)
        ld a1, 120(a0)
        ld a2, 128(a0)
        ld a3, 136(a0)
        ld a4, 144(a0)
        ld a5, 152(a0)
        ld a6, 160(a0)
        ld a7, 168(a0)
        ld s2, 176(a0)
        ld s3, 184(a0)
        ld s4, 192(a0)
        ld s5, 200(a0)
        ld s6, 208(a0)
        ld s7, 216(a0)
        ld s8, 224(a0)
        ld s9, 232(a0)
        ld s10, 240(a0)
        ld s11, 248(a0)
        ld t3, 256(a0)
        ld t4, 264(a0)
        ld t5, 272(a0)
        ld t6, 280(a0)
        ld a0, 112(a0)

        sret
