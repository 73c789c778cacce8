// pool.c: the thread pool behind every multi-threaded kernel.
//
// Why not OpenMP: its workers spin at barriers, and on this 2-vCPU machine a
// spinning pool collapses (3 s per token) when the emulator holds the other
// core. Here nothing ever waits for a particular thread:
//
// * A job is n chunks. The caller and the workers claim chunks one at a time
//   with a compare-and-swap on `work` = (generation << 32 | next chunk), so a
//   descheduled worker just claims nothing and the caller does all the work.
// * The caller waits only for chunks that were actually claimed: a short spin,
//   then a futex sleep that the worker finishing the last chunk wakes.
// * Idle workers spin briefly (jobs of one token come back to back), then
//   sleep on a futex; the caller wakes them only if someone sleeps.
// * A claim carries the generation, so a worker that wakes late can never run
//   a chunk of a newer job with an older job's function.
// * Whether the workers help at all depends on who else wants the cores, which
//   changes while we run (the emulator thread comes and goes). So the pool
//   keeps measuring: it runs 40 ms with workers, 40 ms on the caller alone,
//   compares the time per chunk, and uses the faster mode for the next 400 ms
//   before measuring again. On a core shared with a busy thread, one thread
//   beats two that keep preempting each other.
// * If the caller still had to wait long for a claimed chunk (the worker was
//   preempted mid-chunk), jobs run on the caller alone for a while (10 ms,
//   doubling while it keeps happening, up to 0.5 s).

#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "pool.h"

#define MAXTHREADS 16
#define SPIN_IDLE_NS 200000  // a worker spins this long for the next job, then sleeps
#define SPIN_DONE_NS 50000   // the caller spins this long for stragglers, then sleeps
#define STALL_NS 300000      // a wait this long for a claimed chunk counts as a stall
#define SOLO_MIN_NS 10000000  // first solo period after a stall
#define SOLO_MAX_NS 500000000 // longest solo period
#define PROBE_NS 40000000    // length of each measuring window
#define EXPLOIT_WINDOWS 10   // windows in the chosen mode between measurements
#define CLOSED 0xffffffffu   // `work`'s chunk index while a job is being published

static struct {
  pthread_mutex_t lock;        // guards thread creation
  pthread_mutex_t run;         // one job at a time (two engines may share the pool)
  int nthreads;                // compute threads including the caller
  int started;                 // workers created so far
  _Atomic uint32_t gen;        // job generation; workers futex-wait on it
  _Atomic uint64_t work;       // gen << 32 | next unclaimed chunk
  _Atomic(pool_fn) fn;         // current job
  _Atomic(void *) arg;
  _Atomic int n;               // chunks in the current job
  _Atomic int done;            // chunks finished in the current job
  _Atomic int sleepers;        // workers asleep on gen
  _Atomic uint32_t waiting;    // 1 while the caller sleeps on done
  int fixed;                   // 1: never alone (pyllm_pool_adaptive(0))
  uint64_t solo_until;         // caller works alone until this time (ns)
  uint64_t solo_ns;            // length of the next solo period
  // the mode chooser (guarded by run): phase 0 = measuring with workers,
  // 1 = measuring alone, 2 = using the winner for `left` more windows
  int phase, left, alone;
  uint64_t win_start, win_ns, win_chunks;
  double par_cost;             // ns per chunk measured with workers
  _Atomic long long jobs, chunks_by_workers, sleeps, wakes;  // statistics
  _Atomic long long stalls, solo_jobs, alone_windows, par_windows;
} pool = {
  .lock = PTHREAD_MUTEX_INITIALIZER,
  .run = PTHREAD_MUTEX_INITIALIZER,
  .nthreads = 1,
};

static long
futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
  return syscall(SYS_futex, (uint32_t *)addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static inline uint64_t
now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static inline void
cpu_relax(void)
{
  __builtin_ia32_pause();
}

// Claim and run chunks of job `g` until none is left; returns how many ran.
//
// The job's fn, arg and n are read after `work` shows generation g and before
// the claim's compare-and-swap on that very value. pool_run() moves `work` to
// the next generation (closed) before it rewrites them, so if the swap
// succeeds they were job g's. (Reading them first, as this once did, let a
// worker that woke late pair an older job's fn with a newer job's arg and n,
// claim a chunk of the newer job before its `work` was reset, and run it twice.)
static int
drain(uint32_t g)
{
  int ran = 0;
  for (;;) {
    uint64_t v = atomic_load(&pool.work);
    if ((uint32_t)(v >> 32) != g)
      return ran;
    pool_fn fn = atomic_load(&pool.fn);
    void *arg = atomic_load(&pool.arg);
    int n = atomic_load(&pool.n);
    if ((uint32_t)v >= (uint32_t)n)   // all claimed (or the job is not open yet)
      return ran;
    if (!atomic_compare_exchange_weak(&pool.work, &v, v + 1))
      continue;
    fn(arg, (int)(uint32_t)v);
    ran++;
    if (atomic_fetch_add(&pool.done, 1) + 1 == n && atomic_load(&pool.waiting)) {
      atomic_store(&pool.waiting, 0);
      futex((_Atomic uint32_t *)&pool.waiting, FUTEX_WAKE, 1);
    }
  }
}

static void *
worker(void *idxp)
{
  int idx = (int)(intptr_t)idxp;  // 0-based worker number
  uint32_t seen = atomic_load(&pool.gen);
  for (;;) {
    uint64_t t0 = now_ns();
    uint32_t g;
    int spins = 0;
    // wait for a new job: spin a little (yielding, so that on a shared core
    // the thread with work runs first), then sleep
    while ((g = atomic_load(&pool.gen)) == seen) {
      if (++spins % 16 == 0)
        sched_yield();
      if (spins % 64 == 0 && now_ns() - t0 > SPIN_IDLE_NS) {
        atomic_fetch_add(&pool.sleepers, 1);
        atomic_fetch_add(&pool.sleeps, 1);
        futex(&pool.gen, FUTEX_WAIT, seen);
        atomic_fetch_sub(&pool.sleepers, 1);
        t0 = now_ns();
      }
      cpu_relax();
    }
    seen = g;
    if (idx < pool.nthreads - 1)  // parked when the thread count was lowered
      atomic_fetch_add(&pool.chunks_by_workers, drain(g));
  }
  return 0;
}

// Use n compute threads in total (the caller counts as one). n < 1 means 1.
void
pyllm_set_threads(int n)
{
  if (n < 1)
    n = 1;
  if (n > MAXTHREADS)
    n = MAXTHREADS;
  pthread_mutex_lock(&pool.lock);
  while (pool.started < n - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker, (void *)(intptr_t)pool.started) != 0) {
      pthread_attr_destroy(&attr);
      break;
    }
    pthread_attr_destroy(&attr);
    pool.started++;
  }
  pool.nthreads = n < pool.started + 1 ? n : pool.started + 1;
  pthread_mutex_unlock(&pool.lock);
}

void
pyllm_pool_adaptive(int on)
{
  pthread_mutex_lock(&pool.run);
  pool.fixed = !on;
  pool.solo_until = pool.solo_ns = 0;
  pool.phase = pool.alone = 0;
  pthread_mutex_unlock(&pool.run);
}

int
pyllm_get_threads(void)
{
  return pool.nthreads;
}

// jobs run in parallel, chunks run by workers, worker sleeps, wake-ups sent,
// stalls seen, jobs run alone, measurements won by "alone", won by "workers".
void
pyllm_pool_stats(long long *out8)
{
  out8[0] = pool.jobs;
  out8[1] = pool.chunks_by_workers;
  out8[2] = pool.sleeps;
  out8[3] = pool.wakes;
  out8[4] = pool.stalls;
  out8[5] = pool.solo_jobs;
  out8[6] = pool.alone_windows;
  out8[7] = pool.par_windows;
}

// Account a job of n chunks that took ns, and move the mode chooser along.
// Caller holds pool.run.
static void
choose_mode(uint64_t now, uint64_t ns, int n)
{
  if (pool.win_start == 0)
    pool.win_start = now;
  pool.win_ns += ns;
  pool.win_chunks += n;
  if (now - pool.win_start < PROBE_NS)
    return;
  double cost = (double)pool.win_ns / (pool.win_chunks ? pool.win_chunks : 1);
  if (pool.phase == 0) {         // measured with workers; now measure alone
    pool.par_cost = cost;
    pool.phase = 1;
    pool.alone = 1;
  } else if (pool.phase == 1) {  // measured alone; keep the cheaper mode
    pool.alone = cost < pool.par_cost;
    atomic_fetch_add(pool.alone ? &pool.alone_windows : &pool.par_windows, 1);
    pool.phase = 2;
    pool.left = EXPLOIT_WINDOWS;
  } else if (--pool.left <= 0) {  // time to measure again
    pool.phase = 0;
    pool.alone = 0;
  }
  pool.win_start = now;
  pool.win_ns = pool.win_chunks = 0;
}

// After a job with workers: back off to solo work if a claimed chunk kept the
// caller waiting from t0 to t1, and move the mode chooser along. Holds pool.run.
static void
adapt(uint64_t t0, uint64_t t1, uint64_t ns, int n)
{
  if (t1 - t0 > STALL_NS) {  // a preempted worker held us up: go solo for a while
    atomic_fetch_add(&pool.stalls, 1);
    pool.solo_ns = pool.solo_ns ? pool.solo_ns * 2 : SOLO_MIN_NS;
    if (pool.solo_ns > SOLO_MAX_NS)
      pool.solo_ns = SOLO_MAX_NS;
    pool.solo_until = t1 + pool.solo_ns;
  } else if (pool.solo_ns && t1 > pool.solo_until + pool.solo_ns) {
    pool.solo_ns /= 2;  // calm again for a while: forget the backoff gradually
    if (pool.solo_ns < SOLO_MIN_NS)
      pool.solo_ns = 0;
  }
  choose_mode(t1, ns, n);
}

void
pool_run(pool_fn fn, void *arg, int n)
{
  if (n <= 0)
    return;
  if (pool.nthreads <= 1 || n == 1) {
    for (int i = 0; i < n; i++)
      fn(arg, i);
    return;
  }
  pthread_mutex_lock(&pool.run);
  uint64_t t_start = now_ns();
  if (!pool.fixed && (t_start < pool.solo_until || pool.alone)) {
    atomic_fetch_add(&pool.solo_jobs, 1);
    for (int i = 0; i < n; i++)
      fn(arg, i);
    uint64_t t_end = now_ns();
    if (t_start >= pool.solo_until)  // a measured alone-window, not a stall backoff
      choose_mode(t_end, t_end - t_start, n);
    pthread_mutex_unlock(&pool.run);
    return;
  }
  atomic_fetch_add(&pool.jobs, 1);
  uint32_t g = atomic_load(&pool.gen) + 1;
  // close: from here no claim of an older job can succeed, and none of g yet
  atomic_store(&pool.work, (uint64_t)g << 32 | CLOSED);
  atomic_store(&pool.fn, fn);
  atomic_store(&pool.arg, arg);
  atomic_store(&pool.n, n);
  atomic_store(&pool.done, 0);
  atomic_store(&pool.work, (uint64_t)g << 32);   // open
  atomic_store(&pool.gen, g);
  if (atomic_load(&pool.sleepers) > 0) {
    atomic_fetch_add(&pool.wakes, 1);
    futex(&pool.gen, FUTEX_WAKE, pool.nthreads - 1);
  }
  drain(g);
  // every chunk is claimed; wait for the ones still running elsewhere
  uint64_t t0 = now_ns();
  int waited = atomic_load(&pool.done) < n;
  int spins = 0;
  while (atomic_load(&pool.done) < n) {
    if (++spins % 16 == 0)
      sched_yield();  // the straggler may be waiting for this very core
    if (spins % 64 == 0 && now_ns() - t0 > SPIN_DONE_NS) {
      atomic_store(&pool.waiting, 1);
      if (atomic_load(&pool.done) < n)
        futex((_Atomic uint32_t *)&pool.waiting, FUTEX_WAIT, 1);
      atomic_store(&pool.waiting, 0);
    }
    cpu_relax();
  }
  uint64_t t1 = waited ? now_ns() : t0;
  if (!pool.fixed)
    adapt(t0, t1, t1 - t_start, n);
  pthread_mutex_unlock(&pool.run);
}
