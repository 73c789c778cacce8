// scratch.c: one grow-only buffer per thread for the activations of a
// forward pass (llama.c, qwen35.c).
//
// Why: a decode step's activations are a few MB for a batch; malloc of that
// size is a fresh mmap, so every step paid page faults (the kernel zeroing
// pages) and an munmap -- a few percent of a step, more than some of its
// arithmetic. The engine calls from one thread, so one buffer per thread is
// reused for the whole run; a pthread key frees it when the thread ends (the
// tests start and stop many engine threads).

#include <pthread.h>
#include <stdlib.h>

#include "quant.h"
#include "scratch.h"

struct held {
  void *p;
  size_t bytes;
};

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void
release(void *arg)
{
  struct held *h = arg;
  free(h->p);
  free(h);
}

static void
make_key(void)
{
  pthread_key_create(&key, release);
}

static struct held *
mine(void)
{
  pthread_once(&once, make_key);
  struct held *h = pthread_getspecific(key);
  if (!h && (h = calloc(1, sizeof(*h))) != NULL && pthread_setspecific(key, h) != 0) {
    free(h);
    h = NULL;
  }
  return h;
}

void *
pyllm_scratch(size_t bytes)
{
  struct held *h = mine();
  if (!h)
    return NULL;
  if (h->bytes < bytes) {
    free(h->p);
    h->bytes = 0;
    h->p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!h->p)
      return NULL;
    h->bytes = bytes;
  }
  return h->p;
}

size_t
pyllm_scratch_held(void)
{
  struct held *h = mine();
  return h ? h->bytes : 0;
}

static size_t
round64(size_t b)
{
  return (b + 63) / 64 * 64;
}

float *
pyllm_scratch_acts(long long floats, int n, int wide, struct pyllm_qact *qa)
{
  size_t nb = (size_t)n * (wide / 32);
  size_t part[7] = { sizeof(float) * floats, (size_t)n * wide, sizeof(float) * nb,
                     sizeof(float) * nb, sizeof(int32_t) * nb, sizeof(int16_t) * 2 * nb,
                     sizeof(int16_t) * nb };
  size_t total = 0, at[7];
  for (int i = 0; i < 7; i++) {
    at[i] = total;
    total += round64(part[i]);
  }
  char *p = pyllm_scratch(total);
  if (!p)
    return NULL;
  qa->q = (int8_t *)(p + at[1]);
  qa->d = (float *)(p + at[2]);
  qa->ds = (float *)(p + at[3]);
  qa->s = (int32_t *)(p + at[4]);
  qa->s16 = (int16_t *)(p + at[5]);
  qa->b16 = (int16_t *)(p + at[6]);
  return (float *)p;
}
