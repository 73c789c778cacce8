// test_pool.c: pyllm/kernels/pool.c under a storm of tiny jobs.
//
// Two kinds of job with different argument layouts alternate back to back, as
// the engine's kernels do (a matmul, then a norm, then another matmul). Every
// chunk must run exactly once, with its own job's function and argument, and
// pool_run() must not return before all of its chunks have finished. More
// threads than cores make workers get preempted at every possible point: a
// worker that wakes late must never claim a chunk of a job it did not see
// published whole (a newer job's argument with an older job's function).
//
// Then a few jobs of more chunks than one range word holds, which pool_run()
// runs in segments.
//
// Usage: test_pool [JOBS] [THREADS] [ADAPTIVE]; prints "OK pool ..." or exits 1.
// ADAPTIVE 0 (the default) makes every job use the workers: the pool's own
// chooser would run most of these tiny jobs on the caller alone.

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define MAXN 64
#define BIGN 150001          // more chunks than one range word holds: run in segments
#define MAGIC_A 0x41414141
#define MAGIC_B 0x42424242

struct job_a {               // kind A: magic first
  int magic;
  int n;
  _Atomic int *hits;
  long seq;
};

struct job_b {               // kind B: another layout, magic elsewhere
  double pad[3];
  _Atomic int *hits;
  long seq;
  int n;
  int magic;
};

static _Atomic long bad_kind, bad_index;
static volatile unsigned sink;

static void
spin(int i)
{
  for (int k = 0; k < (i * 37) % 200; k++)  // uneven chunks: some finish late
    sink += k;
}

// Is chunk i of a job with this magic and n chunks one of kind `want`'s?
static int
chunk_ok(int magic, int want, int n, int i)
{
  if (magic != want) {
    atomic_fetch_add(&bad_kind, 1);   // another job's argument under this function
    return 0;
  }
  if (i < 0 || i >= n) {
    atomic_fetch_add(&bad_index, 1);
    return 0;
  }
  return 1;
}

static void
run_a(void *argp, int i)
{
  struct job_a *a = argp;
  if (chunk_ok(a->magic, MAGIC_A, a->n, i)) {
    spin(i);
    atomic_fetch_add(&a->hits[i], 1);
  }
}

static void
run_b(void *argp, int i)
{
  struct job_b *b = argp;
  if (chunk_ok(b->magic, MAGIC_B, b->n, i)) {
    spin(i + 1);
    atomic_fetch_add(&b->hits[i], 1);
  }
}

int
main(int argc, char **argv)
{
  long jobs = argc > 1 ? atol(argv[1]) : 200000;
  int threads = argc > 2 ? atoi(argv[2]) : 3;
  int adaptive = argc > 3 ? atoi(argv[3]) : 0;
  static _Atomic int hits[2][MAXN];
  long missing = 0, doubled = 0;
  unsigned r = 12345;

  pyllm_set_threads(threads);
  pyllm_pool_adaptive(adaptive);
  for (long j = 0; j < jobs; j++) {
    r = r * 1103515245u + 12345u;
    int n = 2 + (int)((r >> 16) % (MAXN - 1));
    int kind = j & 1;
    _Atomic int *h = hits[kind];
    for (int i = 0; i < MAXN; i++)
      atomic_store(&h[i], 0);
    // a fresh argument on the stack each time: a stale pointer reads junk
    if (kind == 0) {
      struct job_a a = { MAGIC_A, n, h, j };
      pool_run(run_a, &a, n);
      memset(&a, 0, sizeof(a));
    } else {
      struct job_b b = { { 0 }, h, j, n, MAGIC_B };
      pool_run(run_b, &b, n);
      memset(&b, 0, sizeof(b));
    }
    for (int i = 0; i < MAXN; i++) {
      int c = atomic_load(&h[i]);
      if (i < n && c == 0)
        missing++;               // pool_run returned before this chunk ran
      else if (c > (i < n))
        doubled++;               // a chunk ran twice, or one past n ran
    }
  }
  // a few jobs longer than a segment (pool.c's SEGMENT): every chunk once
  static _Atomic int big[BIGN];
  for (int k = 0; k < 3; k++) {
    int n = BIGN - k * 7;
    for (int i = 0; i < BIGN; i++)
      atomic_store(&big[i], 0);
    struct job_a a = { MAGIC_A, n, big, k };
    pool_run(run_a, &a, n);
    for (int i = 0; i < BIGN; i++) {
      int c = atomic_load(&big[i]);
      if (i < n && c == 0)
        missing++;
      else if (c > (i < n))
        doubled++;
    }
  }
  long long st[8];
  pyllm_pool_stats(st);
  printf("%s pool jobs=%ld threads=%d parallel_jobs=%lld by_workers=%lld stalls=%lld "
         "missing=%ld doubled=%ld wrong_kind=%ld bad_index=%ld\n",
         missing || doubled || bad_kind || bad_index ? "FAIL" : "OK", jobs, threads, st[0],
         st[1], st[4], missing, doubled, (long)bad_kind, (long)bad_index);
  return missing || doubled || bad_kind || bad_index ? 1 : 0;
}
