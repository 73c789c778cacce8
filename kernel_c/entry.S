// entry.S: the first kernel instructions.
//
// The harness (our firmware) starts hart 0 here in S-mode with paging off,
// a0 = hartid and a1 = the physical address of struct bootinfo. Set up the
// boot stack (which later becomes the scheduler's stack), clear .bss, and
// call main(hartid, bootinfo). ra and s0 are zeroed so a frame-pointer
// backtrace stops at main.
//
// The other harts are parked until main() starts them at _entry_hart
// (HART_START, memlayout.h), with the same a0/a1: each gets its own boot
// stack, leaves .bss alone and calls mainhart(hartid).

#include "param.h"

#define BOOTSTACK (4 * 4096)

.section .text.entry
.global _entry
_entry:
        la sp, stack0
        li t0, BOOTSTACK
        add sp, sp, t0

        // zero .bss (it holds stack0 too, but nothing is on it yet)
        la t0, bss_start
        la t1, bss_end
1:
        bgeu t0, t1, 2f
        sd zero, 0(t0)
        addi t0, t0, 8
        j 1b
2:
        li ra, 0
        li s0, 0
        call main
3:
        wfi
        j 3b

// sp = stack0 + BOOTSTACK * (hartid + 1)
.global _entry_hart
_entry_hart:
        la sp, stack0
        li t0, BOOTSTACK
        addi t1, a0, 1
        mul t0, t0, t1
        add sp, sp, t0
        li ra, 0
        li s0, 0
        call mainhart
        j 3b

.section .bss
.balign 16
.global stack0
stack0:
        .space BOOTSTACK * NCPU
