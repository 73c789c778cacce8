// vnnipeak.h: the int8 compute ceilings of this CPU -- vpdpbusd on registers
// only, no loads, alone or beside a Q4X16 tile's float work -- that the matmul
// microbench (pyllm/matbench.py) sets its GOP/s against.

#ifndef PYLLM_VNNIPEAK_H
#define PYLLM_VNNIPEAK_H

// cffi:begin
// Run `chunks` chunks of `iters` x 16 independent 512-bit vpdpbusd each
// (16 lanes x 4 multiply-adds = 128 int8 ops per instruction) over the thread
// pool; with `epilogue` 1, each 8 of them beside what matmul.c's Q4X16 tile
// does with one token's block sums in float (one vmulps, two vfmadd231ps).
// Returns a checksum so the work cannot be optimised away, or -1 without
// AVX-512 VNNI.
long long pyllm_vnni_peak(long long iters, int chunks, int epilogue);
// cffi:end

#endif
