// pool.h: a small thread pool for data-parallel kernels.

#ifndef PYLLM_POOL_H
#define PYLLM_POOL_H

// cffi:begin
void pyllm_set_threads(int n);
int pyllm_get_threads(void);
void pyllm_pool_stats(long long *out8);
// 1 (the default): the pool decides per kind of job whether workers help (pool.c);
// 0: every job with more than one chunk uses the workers (tests, experiments).
void pyllm_pool_adaptive(int on);
// cffi:end

// A task processes chunk `i` (0 <= i < n) of a job; arg is the job's data.
typedef void (*pool_fn)(void *arg, int i);

// Run fn(arg, i) for every i in [0, n), using the caller and the workers;
// returns when all chunks are done. Not reentrant: one job at a time.
void pool_run(pool_fn fn, void *arg, int n);

// pool_run without the chooser: always with the workers, unless a stall
// backoff is on (pool.c). For the matrix products, which on an idle machine
// run faster on two threads than on one for every row count a decode step
// has, so that measuring them alone (every EXPLORE-th job) only costs time.
void pool_run_par(pool_fn fn, void *arg, int n);

// Always with the workers, and a stall neither backs off nor starts a backoff.
// For the repacking at load: every matrix shape would be a new kind for the
// chooser, whose warm-up runs every other one alone; and one preempted worker
// would send the rest of the load to one thread (a backoff lasts 10 ms and
// doubles up to 0.5 s; a first load of SmolLM2 takes 0.05 s): seen as loads
// 2-4 times slower in rounds that followed llama.cpp's.
void pool_run_bulk(pool_fn fn, void *arg, int n);

#endif
