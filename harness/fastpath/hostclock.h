// hostclock.h: HostClock.mtime (harness/cpu/clock.py) in C, for the C paths that read the
// guest's time without Python (traps.c's rdtime, mmio.c's trace stamps, clint.c's mtime).
#ifndef HARNESS_HOSTCLOCK_H
#define HARNESS_HOSTCLOCK_H

#include <stdint.h>
#include <time.h>

// mtime at hz ticks per second since t0_ns (CLOCK_MONOTONIC, as time.monotonic_ns)
static inline uint64_t fp_host_mtime(int64_t t0_ns, uint64_t hz)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - t0_ns;
    return (uint64_t)((unsigned __int128)ns * hz / 1000000000u);
}

#endif
