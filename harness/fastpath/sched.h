// sched.h: the deterministic machine's instruction counter and switch points, in C.
//
// With a seeded schedule (--schedule, --record, --replay) every hart carries one
// UC_HOOK_CODE hook over all addresses (on_insn): it counts the instruction it is about
// to run, per hart and in total, and ends the run exactly before instruction number
// `limit` (counted over all harts). That is what Unicorn's own `count` does, at the same
// cost, but the count is ours: exact after any kind of stop (a breakpoint, a pause
// yield, a switch point), readable at any time, and saved with a snapshot.
//
// Switch points (on_point) are range hooks on single addresses: the kernel's lock entry
// points and its AMO/SC instructions. At each one the run ends before the instruction
// with a seeded probability (random schedules) or at the `change_at`-th point (PCT's
// priority change points), so a hart switch can land inside a critical section's
// first or last instruction, not only where a slice happens to end.
//
// Data-race sampling (harness race): once the count passes `sample_at`, the next
// S-mode load, store or AMO a hart is about to run (not one through sp: a kernel stack
// is one process's) ends the run before it; Python decodes it and, for a watchable
// access, sets `watch` and holds that hart while the others run. The instructions in
// between are told apart here, so only candidates cost a stop. on_mem (a
// UC_HOOK_MEM_READ|WRITE hook on every hart, installed only while the detector is on)
// reports another hart's access to the watched bytes through fp_py_watch.
//
// The generator is xoshiro256** (Blackman and Vigna): small, fast, and its state is four
// words that a snapshot copies.
#ifndef HARNESS_SCHED_H
#define HARNESS_SCHED_H

#include <stdint.h>
#include <stddef.h>

// cffi:begin
#define SCHED_MAXCPU 8
#define SCHED_MAXSKIP 128
// why the last run stopped, as far as the counter knows
#define SCHED_RAN 0        // something else ended it (wfi, a trap, a device, a Python hook)
#define SCHED_LIMIT 1      // the count reached `limit`
#define SCHED_POINT 2      // a switch point chose to switch
#define SCHED_SAMPLE 3     // a race sample: the hart is before an S-mode instruction

struct sched_watch {
    uint64_t lo, hi;       // physical [lo, hi) watched; hi == 0: none
    uint32_t hart;         // the hart held at its access (its own accesses do not count)
    uint32_t hits;         // accesses by other harts reported so far
};

struct sched {
    uint64_t total;                 // instructions executed by all harts
    uint64_t limit;                 // stop before the instruction that would make total > limit
    uint64_t count[SCHED_MAXCPU];   // instructions executed per hart
    uint64_t hart_limit[SCHED_MAXCPU];  // stop before hart h's instruction once count[h]
                                    // reached this (a debugger's step on the schedule)
    uint64_t rng[4];                // xoshiro256** state
    uint32_t stopped;               // SCHED_* of the last stop the counter made
    uint32_t point_permille;        // random schedules: chance of a switch at a point
    uint64_t change_at;             // PCT: switch at the point that makes points >= this
    uint64_t points;                // switch points passed
    uint64_t switches;              // switch points that switched
    // per hart, its count (+1) at its last switch point: a run that resumes at that
    // point (after switching there, or after a breakpoint stopped it there) goes on
    // without a new draw, so a debugger's stops never change the schedule
    uint64_t point_at[SCHED_MAXCPU];
    uint64_t sample_at;             // race sampling: total at which to take the next sample
    uint64_t sample_mean;           // mean instructions between samples (0: off)
    struct sched_watch watch;
    uint32_t nskip;                 // code never sampled: [skip_lo, skip_hi) ranges (the
    uint64_t skip_lo[SCHED_MAXSKIP], skip_hi[SCHED_MAXSKIP];  // lock primitives, the
};                                  // intended races' lines)

struct sched_hart {
    struct sched *s;
    void *uc;
    void *handle;                   // the Python side (a cffi handle) for fp_py_watch
    uint32_t id;
    size_t hook_insn, hook_mem;
    size_t hook_points[64];         // handles of the switch-point hooks
    uint32_t npoints;
    void *reg_read, *hook_add, *hook_del, *emu_stop, *vmem_read;
};

int sched_attach(struct sched_hart *h);
int sched_add_point(struct sched_hart *h, uint64_t addr);
int sched_watch_accesses(struct sched_hart *h, int on);
int sched_detach(struct sched_hart *h);
void sched_seed(struct sched *s, uint64_t seed);
uint64_t sched_next(struct sched *s);
uint64_t sched_below(struct sched *s, uint64_t n);
// cffi:end

// the race detector's Python side (fp_py_watch in build.py): another hart touched the
// watched bytes at physical addr (write: 1 for a store, 0 for a load)
int fp_py_watch(void *handle, uint64_t addr, int size, int write);

#endif
