// traps.h: synchronous trap delivery in C, registered with Unicorn as its hook functions.
//
// The C twin of harness/machine/traps.py, which stays the specification and the Python path:
// the same causes, the same stval, the same rdtime emulation, the same counters. What C
// cannot decide (an ecall from S, an unset stvec, an exception this machine does not
// model, rdtime under --clock icount) it hands to the Python path (fp_py_intr /
// fp_py_invalid, harness/machine/traps_c.py), which raises the MachineFault or reads
// Python's clock. `python` > 0 sends every trap there (HARNESS_TRAPS=python at run time).
#ifndef HARNESS_TRAPS_H
#define HARNESS_TRAPS_H

#include <stdint.h>

// cffi:begin
#define FP_NCAUSE 16

struct fp_hart {
    void *uc;                  // the hart's uc_engine
    void *handle;              // the Python NativeTraps (a cffi handle)
    uint64_t *counts;          // delivered traps by scause, shared by the machine's harts
    uint64_t rdtime;           // rdtime/csrr time emulated
    uint64_t python_traps;     // traps the Python path took (fallbacks and forced)
    int ebreak_delivered;      // emu_start will end with a spurious UC_ERR_EXCEPTION
    int python;                // > 0: hand every trap to the Python path
    int watch;                 // the machine's after_trap wants the exceptions (Traps.watch)
    int64_t hurry_ns;          // > 0: a trap from U-mode at or after this CLOCK_MONOTONIC
    int hurried;               // time ends the run, and sets this (Traps.hurry)
    int host_clock;            // rdtime = host monotonic time (else ask Python's clock)
    int64_t t0_ns;             // HostClock.t0 (CLOCK_MONOTONIC ns at reset)
    uint64_t hz;               // TIMEBASE_HZ
    size_t hook_intr, hook_invalid;  // Unicorn hook handles
    // libunicorn's entry points (unicorn_api.h prototypes)
    void *reg_read, *reg_write, *reg_write2, *reg_write_batch, *vmem_read;
    void *hook_add, *hook_del, *ctl, *emu_stop;
};

int fp_attach(struct fp_hart *h);
int fp_detach(struct fp_hart *h);
int fp_mem_operand(uint32_t insn, int length, int *base, int64_t *disp, int *size);
// cffi:end

// the Python path, defined by cffi (`extern "Python+C"` in build.py) and implemented by
// harness/machine/traps_c.py: the same arguments as the Unicorn hooks they stand in for
void fp_py_intr(void *uc, uint32_t intno, void *handle);
int fp_py_invalid(void *uc, void *handle);

#endif
