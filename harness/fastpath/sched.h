// sched.h: the deterministic machine's instruction counter and switch points, in C.
//
// With a seeded schedule (--schedule, --record, --replay) every hart's instructions are
// counted exactly, per hart and in total, and a run ends exactly before instruction
// number `limit` (counted over all harts) or before hart h's instruction number
// `hart_limit[h]`: the count is ours, exact after any kind of stop (a breakpoint, a pause
// yield, a switch point), readable at any time, and saved with a snapshot.
//
// Counting per translated block. A C UC_HOOK_BLOCK (on_block) runs at the start of each
// translated block (TB) Unicorn executes; it knows the block's instruction count (the
// block is decoded once: fixed code through a cache, user code from its bytes) and adds
// it when the hart leaves the block. A block is left early only in ways that reach a hook
// of ours or end the run, and each such place counts the instructions before the PC:
// - an exception or ebreak: our UC_HOOK_INTR / UC_HOOK_INSN_INVALID hooks run before the
//   trap hooks (harness/fastpath/traps.c); the faulting instruction counts (it was started);
// - a stop (emu_stop from any hook, an MMIO stop, an error): sched_end after the run; the
//   instruction at the PC counts unless our own stop was before it (the machine gives it
//   back with `uncount` when its hook stopped before it); wfi ends the run with the PC
//   past it, still inside its block;
// - interrupts are taken only between blocks (QEMU checks them before finding a block).
// During a run, the blocks a hart has finished are in its budget (`budget - left`), added
// to the counter when the run ends; at any moment the count is that plus the current
// block's instructions up to the PC (sched_total_now). Unicorn writes the PC before
// every code hook, memory hook and trap hook; for MMIO callbacks the device windows are
// mapped without permissions and a UC_HOOK_MEM_READ_PROT|WRITE_PROT hook (on_mmio) lets
// each access through, which makes Unicorn write the PC first (a device stamping a
// request reads the exact time).
//
// Ending a run inside a block. When the limit falls inside the block about to run, the
// block hook sets a Unicorn "exit" at the instruction where the run must end (an exit is
// compiled into translations: the TB ends before it and stops emulation), drops the
// translations that contain it, and moves the PC back to the block's start (which leaves
// the TB without stopping), so the block is translated again ending at the exit.
//
// The kernel's privilege is followed too: a U-mode block at the address of kernel code is
// not kernel code (a user program can be linked anywhere), so blocks of the kernel's code
// ranges (`struct sched_code`) come from the shared cache only in S-mode. The privilege
// is read (REG_PRIV) when it may have changed: after a trap hook, after an sret (a code
// hook on each sret of the image), at a U-mode block in kernel code (an interrupt).
//
// Switch points (on_point) are range hooks on single addresses: the kernel's lock entry
// points and its AMO/SC instructions. At each one the run ends before the instruction
// with a seeded probability (random schedules) or at the `change_at`-th point (PCT's
// priority change points), so a hart switch can land inside a critical section's
// first or last instruction, not only where a slice happens to end.
//
// Data-race sampling (harness race): while it is on, a UC_HOOK_CODE over all addresses
// (on_insn, each hart's first code hook when sampling is on from its first run) looks at
// every instruction: once the count passes `sample_at`, the next
// S-mode load, store or AMO a hart is about to run (not one through sp: a kernel stack
// is one process's) ends the run before it; Python decodes it and, for a watchable
// access, sets `watch` and holds that hart while the others run. on_mem (a
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
#define SCHED_MAXPOINTS 64
#define SCHED_MAXFIXED 8       // kernel code ranges
#define SCHED_MAXWIN 16        // device windows
#define SCHED_MAXSRET 32       // sret instructions hooked
#define SCHED_CACHE 16384      // blocks of kernel code remembered (a power of two)
#define SCHED_TLB 64           // user code pages a hart remembers (a power of two)
#define SCHED_XBUF 8192        // bytes: a block read through the MMU (larger than any TB)
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

struct sched_block {                // a translated block of kernel code
    uint32_t va;                    // its address's low 32 bits (the ranges differ there)
    uint16_t size, n;               // bytes, instructions
};

struct sched_code {                 // one machine's memory layout, shared by its harts
    uint8_t *ram;                   // guest RAM in host memory (NULL: unknown, every block
    uint64_t ram_base, ram_size;    // is then read through the MMU)
    // kernel code: virtual [lo, hi) at physical fixed_pa (host fixed_host), the same in
    // S-mode in every address space (the image's executable segments, the trampoline
    // page); the first is the kernel's text, which on_block looks up without a call
    uint32_t nfixed;
    uint64_t fixed_lo[SCHED_MAXFIXED], fixed_hi[SCHED_MAXFIXED], fixed_pa[SCHED_MAXFIXED];
    uint8_t *fixed_host[SCHED_MAXFIXED];
    // the blocks of the first range (the kernel's text) by (va - lo) / 2: size | n << 16,
    // 0 if not seen yet (Python allocates it); the other ranges' in `cache`
    uint32_t *slots;
    uint32_t nwin;                  // device windows, physical [lo, hi)
    uint64_t win_lo[SCHED_MAXWIN], win_hi[SCHED_MAXWIN];
    uint64_t misses, exits;         // kernel blocks decoded, runs ended inside a block
    struct sched_block cache[SCHED_CACHE];
};

struct sched_hart {
    // what on_block reads at every block first, together: the kernel text's range
    // (code->fixed_lo[0] .. fixed_hi[0]), its bytes and its block table (code->slots)
    uint64_t text_lo, text_len;
    const uint8_t *text;
    const uint32_t *slots;
    struct sched *s;
    const struct sched_code *code;
    uint32_t id;
    uint32_t cur_n;                 // the block being executed: its instructions (0: none),
    uint64_t cur_va;                // counted when it is left; its address, size and bytes
    uint32_t cur_size;              // (in guest RAM, or a copy in xbuf)
    int user;                       // the hart runs in U-mode (as of the last look)
    const uint8_t *cur_code;
    // in a run: instructions the hart may still run (`budget` at its start); the
    // difference is the blocks it has finished, added to `s` when the run ends
    uint64_t left, budget;
    int mode_unknown;               // look at REG_PRIV at the next block
    int exit_armed;                 // a run that ends inside a block: its exit, and the
    uint64_t exit_va, exit_block;   // block that ends there
    uint64_t next_va;               // on_insn: the instruction expected next, its index in
    uint32_t next_idx;              // the block
    uint32_t arms;                  // exits set in this run (a bound: see on_block)
    int error;                      // the count cannot be trusted (sched_end reports it)
    int sampling;                   // race sampling is on
    void *uc;
    void *handle;                   // the Python side (a cffi handle) for fp_py_watch
    // user code pages: virtual page -> host address (NULL: not RAM), valid while
    // tlb_tag == tlb_gen (a new generation each run and each entry to U-mode)
    uint64_t tlb_gen;
    uint64_t tlb_page[SCHED_TLB], tlb_tag[SCHED_TLB];
    uint8_t *tlb_host[SCHED_TLB];
    size_t hook_block, hook_intr, hook_invalid, hook_insn, hook_mem, hook_mmio;
    size_t hook_points[SCHED_MAXPOINTS];
    uint32_t npoints;
    size_t hook_sret[SCHED_MAXSRET];
    uint32_t nsret;
    // libunicorn's entry points (unicorn_api.h)
    void *reg_read, *reg_write, *hook_add, *hook_del, *emu_stop, *vmem_read;
    void *vmem_translate, *ctl, *mem_protect;
    uint8_t xbuf[SCHED_XBUF];
};

int sched_attach(struct sched_hart *h);
int sched_add_point(struct sched_hart *h, uint64_t addr);
int sched_add_sret(struct sched_hart *h, uint64_t addr);
int sched_guard_mmio(struct sched_hart *h);
void sched_layout(struct sched_hart *h);
int sched_sampling(struct sched_hart *h, int on);
int sched_watch_accesses(struct sched_hart *h, int on);
int sched_detach(struct sched_hart *h);
void sched_begin(struct sched_hart *h);
int sched_end(struct sched_hart *h);
uint64_t sched_total_now(struct sched_hart *h);
uint64_t sched_count_now(struct sched_hart *h);
uint32_t sched_insns(const uint8_t *code, uint32_t size);
void sched_seed(struct sched *s, uint64_t seed);
uint64_t sched_next(struct sched *s);
uint64_t sched_below(struct sched *s, uint64_t n);
// cffi:end

// the race detector's Python side (fp_py_watch in build.py): another hart touched the
// watched bytes at physical addr (write: 1 for a store, 0 for a load)
int fp_py_watch(void *handle, uint64_t addr, int size, int write);

#endif
