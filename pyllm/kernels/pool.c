// pool.c: the thread pool behind every multi-threaded kernel.
//
// Why not OpenMP: its workers spin at barriers, and on this 2-vCPU machine a
// spinning pool collapses when the emulator holds the other core. Here nothing
// ever waits for a particular thread:
//
// * A job is n chunks, split into one contiguous range per thread. Each
//   thread claims chunks from the front of its own range with a
//   compare-and-swap on that range's word (generation << 32 | hi << 16 | lo),
//   which lives on the thread's own cache line; once its range is empty it
//   steals from the back of the others'. So a descheduled worker just claims
//   nothing and the caller does its share, while in the common case no claim
//   moves a cache line between the cores and each thread streams through
//   neighbouring chunks (a matrix's weights in memory order, which the
//   hardware prefetcher follows). One shared counter that every claim
//   updated, chunks dealt out alternately, made an 8-row decode step of
//   SmolLM2 slower on two threads than on one.
// * The caller waits only for chunks that were actually claimed: a short spin,
//   then a futex sleep that the worker finishing the last chunk wakes.
// * Idle workers spin briefly (jobs of one token come back to back), then
//   sleep on a futex; the caller wakes them only if someone sleeps.
// * A claim carries the generation, so a worker that wakes late can never run
//   a chunk of a newer job with an older job's function.
// * Whether the workers help at all depends on who else wants the cores, which
//   changes while we run (the emulator thread comes and goes). So the pool
//   keeps measuring, per kind of job (one function with one number of chunks:
//   a decode step repeats the same kinds): a kind's first WARMUP jobs
//   alternate between running with the workers and alone, and from then on
//   each job runs in the mode whose moving average time is lower, except that
//   every EXPLORE-th job of the kind runs in the other, so a change is
//   noticed. On a core shared with a busy thread, one thread beats two that
//   keep preempting each other. The records are per kind because kinds gain
//   differently from the workers: one record for all jobs, comparing time
//   windows of whatever jobs fell in them, picks the wrong mode. The matrix
//   products skip the chooser (pool_run_par): on an idle machine two threads
//   do them faster even for one row, and the chooser's exploring and
//   bookkeeping cost a decode step more than it could save there.
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
#include <string.h>
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
#define KINDS 64             // kinds of job the chooser tells apart (direct-mapped)
#define EXPLORE 32           // every EXPLORE-th job of a kind runs in the other mode
#define WARMUP 6             // a kind's first jobs alternate between the modes
#define SEGMENT 0xffff       // most chunks per range word; longer jobs run in segments

// A thread's share of the current job: chunks [lo, hi) of generation gen,
// packed in one word so that a claim is one compare-and-swap. On its own
// cache line: its owner claims from it at every chunk.
struct range {
  _Alignas(64) _Atomic uint64_t word;
};

// The chooser's record of one kind of job (guarded by pool.run).
struct kind {
  pool_fn fn;
  int n;
  uint32_t jobs;
  float ns[2];  // moving average of a job's time with the workers [0], alone [1]; 0 = none yet
};

static inline uint64_t
range_word(uint32_t gen, uint32_t lo, uint32_t hi)
{
  return (uint64_t)gen << 32 | (uint64_t)hi << 16 | lo;
}

static struct {
  pthread_mutex_t lock;        // guards thread creation
  pthread_mutex_t run;         // one job at a time (two engines may share the pool)
  int nthreads;                // compute threads including the caller
  int started;                 // workers created so far
  _Atomic uint32_t gen;        // job generation; workers futex-wait on it
  struct range ranges[MAXTHREADS];  // range t: the caller's (0) or worker t-1's
  _Atomic(pool_fn) fn;         // current job
  _Atomic(void *) arg;
  _Atomic int base;            // the current segment's first chunk
  _Atomic int n;               // chunks in the current segment
  _Atomic int nranges;         // ranges the segment was split into
  _Atomic int done;            // chunks of the segment finished
  _Atomic int sleepers;        // workers asleep on gen
  _Atomic uint32_t waiting;    // 1 while the caller sleeps on done
  int fixed;                   // 1: never alone (pyllm_pool_adaptive(0))
  uint64_t solo_until;         // caller works alone until this time (ns)
  uint64_t solo_ns;            // length of the next solo period
  struct kind kinds[KINDS];    // the mode chooser's records (guarded by run)
  _Atomic long long jobs, chunks_by_workers, sleeps, wakes;  // statistics
  _Atomic long long stalls, solo_jobs, chosen_alone, chosen_par;
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

// Claim chunk of job `g` from range r: its front if the range is the
// caller's own (steal = 0), its back otherwise. Returns the chunk, or -1 if
// the range holds none of job g.
static inline int
claim(int r, uint32_t g, int steal)
{
  _Atomic uint64_t *w = &pool.ranges[r].word;
  uint64_t v = atomic_load(w);
  for (;;) {
    uint32_t lo = v & 0xffff, hi = (v >> 16) & 0xffff;
    if ((uint32_t)(v >> 32) != g || lo >= hi)
      return -1;
    uint64_t next = steal ? range_word(g, lo, hi - 1) : range_word(g, lo + 1, hi);
    if (atomic_compare_exchange_weak(w, &v, next))
      return (int)(steal ? hi - 1 : lo);
  }
}

// Run chunks of job `g` until none is left: first range `own`, then the
// others' backs. Returns how many ran.
//
// The job's fn, arg and base are read after a range word showed generation g
// and before the claim's compare-and-swap on that very word. pool_run()
// rewrites them only after every chunk of g has been claimed and run, and a
// claim of g succeeds only while some chunk of g is unclaimed, so a
// successful claim always pairs g's chunk with g's function. (Reading them
// before looking at the generation, as this once did, let a worker that woke
// late run an older job's fn on a newer job's chunk.)
static int
drain(uint32_t g, int own)
{
  int ran = 0, nr = atomic_load(&pool.nranges);
  for (int k = 0; k < nr; k++) {
    int r = (own + k) % nr;
    for (;;) {
      pool_fn fn = atomic_load(&pool.fn);
      void *arg = atomic_load(&pool.arg);
      int base = atomic_load(&pool.base);
      int c = claim(r, g, r != own);
      if (c < 0)
        break;
      fn(arg, base + c);
      ran++;
    }
  }
  if (ran) {
    int n = atomic_load(&pool.n);
    if (atomic_fetch_add(&pool.done, ran) + ran == n && atomic_load(&pool.waiting)) {
      atomic_store(&pool.waiting, 0);
      futex((_Atomic uint32_t *)&pool.waiting, FUTEX_WAKE, 1);
    }
  }
  return ran;
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
      atomic_fetch_add(&pool.chunks_by_workers, drain(g, idx + 1));
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
  memset(pool.kinds, 0, sizeof(pool.kinds));
  pthread_mutex_unlock(&pool.run);
}

int
pyllm_get_threads(void)
{
  return pool.nthreads;
}

// jobs run in parallel, chunks run by workers, worker sleeps, wake-ups sent,
// stalls seen, jobs run alone, jobs the chooser ran alone, with the workers.
void
pyllm_pool_stats(long long *out8)
{
  out8[0] = pool.jobs;
  out8[1] = pool.chunks_by_workers;
  out8[2] = pool.sleeps;
  out8[3] = pool.wakes;
  out8[4] = pool.stalls;
  out8[5] = pool.solo_jobs;
  out8[6] = pool.chosen_alone;
  out8[7] = pool.chosen_par;
}

// The record of jobs of fn with n chunks (a new one replaces whatever kind
// shared its slot). Caller holds pool.run.
static struct kind *
kind_of(pool_fn fn, int n)
{
  // n goes in before the multiply: added after it, n would change only the
  // bits the slot index drops, so one function's jobs of different sizes (a
  // layer's products) would share a slot and reset each other's record at
  // every job
  uint64_t h = (((uint64_t)(uintptr_t)fn >> 4) + (uint64_t)(uint32_t)n * 0x100000001b3ull) *
               0x9e3779b97f4a7c15ull;
  struct kind *k = &pool.kinds[(h >> 32) % KINDS];
  if (k->fn != fn || k->n != n)
    *k = (struct kind){ fn, n, 0, { 0, 0 } };
  return k;
}

// 1 if the next job of kind k should run on the caller alone.
static int
pick_alone(const struct kind *k)
{
  if (k->jobs < WARMUP)  // alternate first: a kind's first job may be a cold outlier
    return k->jobs & 1;
  int alone = k->ns[1] < k->ns[0];
  return k->jobs % EXPLORE == 0 ? !alone : alone;
}

// A job of kind k took ns in mode `alone`.
static void
record(struct kind *k, int alone, uint64_t ns)
{
  float x = (float)ns, *avg = &k->ns[alone];
  *avg = *avg == 0 ? x : *avg + (x - *avg) / 4;
  k->jobs++;
  atomic_fetch_add(alone ? &pool.chosen_alone : &pool.chosen_par, 1);
}

// After a job with workers: back off to solo work if a claimed chunk kept the
// caller waiting `waited` ns too long (run_segment) until t1. Holds pool.run.
static void
check_stall(uint64_t waited, uint64_t t1)
{
  if (waited > STALL_NS) {  // a preempted worker held us up: go solo for a while
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
}

// Publish chunks [base, base + m) as a new job, work on them with the
// workers, and wait for the ones claimed elsewhere. Returns how much longer
// that wait took than two of the caller's own chunks (ns): a worker's last
// chunk may just have started when the caller ran out, and only a wait beyond
// that says the worker was preempted. Caller holds pool.run.
static uint64_t
run_segment(pool_fn fn, void *arg, int base, int m)
{
  uint32_t g = atomic_load(&pool.gen) + 1;
  int nr = pool.nthreads;
  // every chunk of the previous job was claimed, so no range admits a claim
  // until it carries g: the job's fields can be rewritten first
  atomic_store(&pool.fn, fn);
  atomic_store(&pool.arg, arg);
  atomic_store(&pool.base, base);
  atomic_store(&pool.n, m);
  atomic_store(&pool.nranges, nr);
  atomic_store(&pool.done, 0);
  for (int r = 0; r < nr; r++)
    atomic_store(&pool.ranges[r].word,
                 range_word(g, (uint32_t)((long long)m * r / nr),
                            (uint32_t)((long long)m * (r + 1) / nr)));
  atomic_store(&pool.gen, g);
  if (atomic_load(&pool.sleepers) > 0) {
    atomic_fetch_add(&pool.wakes, 1);
    futex(&pool.gen, FUTEX_WAKE, nr - 1);
  }
  uint64_t t_open = now_ns();
  int ran = drain(g, 0);
  // every chunk is claimed; wait for the ones still running elsewhere
  uint64_t t0 = now_ns();
  if (atomic_load(&pool.done) >= m)
    return 0;
  uint64_t two_chunks = ran ? 2 * (t0 - t_open) / ran : 0;
  int spins = 0;
  while (atomic_load(&pool.done) < m) {
    if (++spins % 16 == 0)
      sched_yield();  // the straggler may be waiting for this very core
    if (spins % 64 == 0 && now_ns() - t0 > SPIN_DONE_NS) {
      atomic_store(&pool.waiting, 1);
      if (atomic_load(&pool.done) < m)
        futex((_Atomic uint32_t *)&pool.waiting, FUTEX_WAIT, 1);
      atomic_store(&pool.waiting, 0);
    }
    cpu_relax();
  }
  uint64_t waited = now_ns() - t0;
  return waited > two_chunks ? waited - two_chunks : 0;
}

// How a job picks between the workers and the caller alone: the chooser
// (pool_run), always the workers unless backing off after a stall
// (pool_run_par), always the workers and never a stall (pool_run_bulk).
enum { MODE_CHOOSE, MODE_PAR, MODE_BULK };

static void
run_job(pool_fn fn, void *arg, int n, int mode)
{
  int choose = mode == MODE_CHOOSE, stalls = mode != MODE_BULK;
  if (n <= 0)
    return;
  if (pool.nthreads <= 1 || n == 1) {
    for (int i = 0; i < n; i++)
      fn(arg, i);
    return;
  }
  pthread_mutex_lock(&pool.run);
  uint64_t t_start = now_ns();
  struct kind *k = pool.fixed || !choose ? NULL : kind_of(fn, n);
  int backoff = !pool.fixed && stalls && t_start < pool.solo_until;
  if (backoff || (k && pick_alone(k))) {
    atomic_fetch_add(&pool.solo_jobs, 1);
    for (int i = 0; i < n; i++)
      fn(arg, i);
    if (!backoff)  // a chosen alone-run, not a stall backoff: it measures
      record(k, 1, now_ns() - t_start);
    pthread_mutex_unlock(&pool.run);
    return;
  }
  atomic_fetch_add(&pool.jobs, 1);
  uint64_t wait_ns = 0;  // the longest excess wait of a segment (run_segment)
  for (int base = 0; base < n; base += SEGMENT) {
    uint64_t w = run_segment(fn, arg, base, n - base < SEGMENT ? n - base : SEGMENT);
    wait_ns = w > wait_ns ? w : wait_ns;
  }
  uint64_t t1 = now_ns();
  if (!pool.fixed && stalls)
    check_stall(wait_ns, t1);
  if (k)
    record(k, 0, t1 - t_start);
  pthread_mutex_unlock(&pool.run);
}

void
pool_run(pool_fn fn, void *arg, int n)
{
  run_job(fn, arg, n, MODE_CHOOSE);
}

void
pool_run_par(pool_fn fn, void *arg, int n)
{
  run_job(fn, arg, n, MODE_PAR);
}

void
pool_run_bulk(pool_fn fn, void *arg, int n)
{
  run_job(fn, arg, n, MODE_BULK);
}
