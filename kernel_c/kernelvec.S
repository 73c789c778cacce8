// kernelvec.S: entry for traps taken in S-mode (stvec while in the kernel).
//
// Interrupts arrive here natively; synchronous exceptions (page faults,
// illegal instructions) are delivered here by the harness. We save the
// caller-saved registers on the current kernel stack and call kerneltrap().
//
// The frame also holds a frame record so a frame-pointer backtrace (the
// harness's panic report, gdb) walks from kerneltrap() into the function
// that was interrupted. With gcc's -fno-omit-frame-pointer convention a
// frame pointer fp has the return address at fp-8 and the caller's fp at
// fp-16; kernelvec builds exactly that with ra = sepc:
//
//   sp+160  <- s0 while kerneltrap runs (frame "top")
//   sp+152  sepc            (fp-8: "return address" = interrupted pc)
//   sp+144  interrupted s0  (fp-16: the interrupted function's frame)
//   sp+136  t6 ... sp+0 ra  (saved registers, layout below)
//
// Registers kerneltrap() must preserve by the C ABI (s1-s11, sp) are not
// saved here.

#include "riscv.h"
#include "param.h"
#include "vmlayout.h"

// one kernel stack slot: the stack and the guard page below it
#define KSLOT (KSTACKSIZE + PGSIZE)

.globl kerneltrap
.globl kstackoverflow
.globl kernelvec
.align 4
kernelvec:
        // A trap taken because a kernel stack overflowed into its guard page
        // would fault again on the first push below, forever. So check first
        // where the frame would go: with d = TRAMPOLINE - (sp - 160) and
        // r = d % KSLOT, the frame touches a guard page exactly when
        // d <= NPROC*KSLOT + PGSIZE and 0 < r <= PGSIZE (vmlayout.h).
        // Nothing may be stored before the check, and every hart can be here
        // at once, so the two temporaries are t0 (waiting in sscratch, unused
        // while the kernel runs) and sp itself, which holds d meanwhile:
        // sp = (TRAMPOLINE + 160) - d puts it back.
        csrw sscratch, t0
        li t0, TRAMPOLINE + 160
        sub sp, t0, sp                  // sp = d
        li t0, NPROC * KSLOT + PGSIZE
        bgtu sp, t0, 1f                 // not a process kernel stack
        li t0, KSLOT
        remu t0, sp, t0                 // t0 = r
        beqz t0, 1f
        addi t0, t0, -1
        srli t0, t0, 12                 // r <= PGSIZE: (r - 1) >> 12 == 0
        beqz t0, overflow
1:
        li t0, TRAMPOLINE + 160
        sub sp, t0, sp                  // sp back
        csrr t0, sscratch

        addi sp, sp, -160

        sd ra, 0(sp)
        sd gp, 8(sp)
        sd tp, 16(sp)
        sd t0, 24(sp)
        sd t1, 32(sp)
        sd t2, 40(sp)
        sd a0, 48(sp)
        sd a1, 56(sp)
        sd a2, 64(sp)
        sd a3, 72(sp)
        sd a4, 80(sp)
        sd a5, 88(sp)
        sd a6, 96(sp)
        sd a7, 104(sp)
        sd t3, 112(sp)
        sd t4, 120(sp)
        sd t5, 128(sp)
        sd t6, 136(sp)

        // the frame record
        sd s0, 144(sp)
        csrr t0, sepc
        sd t0, 152(sp)
        addi s0, sp, 160

        call kerneltrap

        ld ra, 0(sp)
        ld gp, 8(sp)
        // not tp: it holds the hart id, which the trap cannot change
        ld t0, 24(sp)
        ld t1, 32(sp)
        ld t2, 40(sp)
        ld a0, 48(sp)
        ld a1, 56(sp)
        ld a2, 64(sp)
        ld a3, 72(sp)
        ld a4, 80(sp)
        ld a5, 88(sp)
        ld a6, 96(sp)
        ld a7, 104(sp)
        ld t3, 112(sp)
        ld t4, 120(sp)
        ld t5, 128(sp)
        ld t6, 136(sp)
        ld s0, 144(sp)

        addi sp, sp, 160

        // back to the interrupted kernel code (sepc, sstatus restored by
        // kerneltrap)
        sret

// The kernel stack overflowed: panic on a spare stack, with a frame record
// {sepc, s0} so the backtrace still shows the function that overflowed.
overflow:
        li t0, TRAMPOLINE + 160
        sub sp, t0, sp                  // sp back
        csrr t0, sscratch
        mv a0, sp                       // kstackoverflow(sp)
        la sp, panicstack + 4096
        addi sp, sp, -16
        sd s0, 0(sp)
        csrr s0, sepc
        sd s0, 8(sp)
        addi s0, sp, 16
        call kstackoverflow             // never returns

.section .bss
.balign 16
panicstack:                             // the stack kstackoverflow() runs on
        .space 4096
