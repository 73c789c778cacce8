// clint.c: the CLINT's mtime and mtimecmp in C, with the host clock (harness/devices/clint.py
// is the specification; each function names the Python one it mirrors).
//
// A mtimecmp store re-evaluates every hart's STIP here. Python is told (fp_py_clint, which
// re-arms the waker thread) only when the earliest deadline not yet raised now falls before
// the running slice's deadline (armed_ns, which the machine writes whenever the waker's
// deadline changes): the common store, a timer handler moving its deadline to the next
// tick, stays in C. The slice then ends no later than it must, at armed_ns, and the run
// loop's Clint.tick and _deadline_ns read the state here.

#include <limits.h>

#include "hostclock.h"
#include "mmio.h"

#define LOW32 0xFFFFFFFFull

// Clint._hart_of, for an aligned 4-byte access; -1 if not a mtimecmp half
static int hart_of(struct fp_clint *c, uint64_t offset, uint32_t size)
{
    if (size != 4 || offset < c->cmp_off || offset % 4)
        return -1;
    uint64_t h = (offset - c->cmp_off) / c->stride;
    return h < (uint64_t)c->nharts ? (int)h : -1;
}

// Clint.tick
static void tick(struct fp_clint *c)
{
    uint64_t now = fp_host_mtime(c->t0_ns, c->hz);
    for (int h = 0; h < c->nharts; h++) {
        uint8_t level = now >= c->cmp[h];
        if (level != c->level[h]) {
            c->level[h] = level;
            fp_set_mip(c->uc[h], c->reg_read, c->reg_write, c->stip, level);
        }
    }
}

// HostClock.host_ns of Clint.armed_ahead: when the next deadline not raised yet comes
static int64_t next_deadline_ns(struct fp_clint *c)
{
    uint64_t cmp = UINT64_MAX;
    for (int h = 0; h < c->nharts; h++)
        if (!c->level[h] && c->cmp[h] < cmp)
            cmp = c->cmp[h];
    if (cmp == UINT64_MAX)
        return INT64_MAX;
    unsigned __int128 ns = ((unsigned __int128)cmp * 1000000000u + c->hz - 1) / c->hz;
    ns += (unsigned __int128)c->t0_ns;
    return ns >= (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)ns;
}

// Clint.read: mtime (an 8-byte load's high half pairs with the low half just read) and
// mtimecmp
int fp_clint_read(struct fp_window *w, uint64_t offset, uint32_t size, uint64_t *value)
{
    struct fp_clint *c = w->dev;
    if (size == 4 && offset == c->mtime_off) {
        c->latched = fp_host_mtime(c->t0_ns, c->hz);
        c->latched_ok = 1;
        *value = c->latched & LOW32;
    } else if (size == 4 && offset == c->mtime_off + 4) {
        uint64_t t = c->latched_ok ? c->latched : fp_host_mtime(c->t0_ns, c->hz);
        c->latched_ok = 0;
        *value = t >> 32;
    } else {
        int h = hart_of(c, offset, size);
        if (h < 0)
            return 0;
        int high = (offset - c->cmp_off) % c->stride != 0;
        *value = (c->cmp[h] >> (high ? 32 : 0)) & LOW32;
    }
    c->fast++;
    return 1;
}

// Clint.write, mtimecmp: set the half, re-evaluate STIP, move the deadline
int fp_clint_write(struct fp_window *w, uint64_t offset, uint32_t size, uint64_t value)
{
    struct fp_clint *c = w->dev;
    int h = hart_of(c, offset, size);
    if (h < 0)
        return 0;
    value &= LOW32;
    if ((offset - c->cmp_off) % c->stride == 0)
        c->cmp[h] = (c->cmp[h] & ~LOW32) | value;
    else
        c->cmp[h] = (c->cmp[h] & LOW32) | (value << 32);
    tick(c);
    c->fast++;
    if (next_deadline_ns(c) < c->armed_ns) {
        c->calls++;
        fp_py_clint(w->bus->handle, w->index);
    }
    return 1;
}
