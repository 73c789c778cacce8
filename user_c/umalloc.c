// umalloc.c: malloc/free for user programs.
//
// Memory comes from sbrk() and is handed out in 16-byte units. Each block
// starts with a one-unit header (its size in units, and while free the next
// free block). Free blocks sit on one list sorted by address, so free()
// can merge a block with both neighbours; malloc() takes the next block
// that fits, searching from where its last search ended (next fit, as K&R's
// malloc: a first fit walks every small leftover at the low end again on
// each call, which made a heap of 10,000 blocks quadratic), and splits off
// the tail. The heap never shrinks.

#include "types.h"
#include "user.h"

struct hdr {
  struct hdr *next;   // next free block (higher address); free blocks only
  uint64 units;       // block size in units, header included
};

#define UNIT      sizeof(struct hdr)
#define MINGROW   4096          // units asked of sbrk at a time (64 KiB)

static struct hdr *freelist;    // lowest free block, or 0
static struct hdr *rover;       // the free block malloc looks at first, or 0

// Puts block b on the free list, merging it with adjacent free blocks.
static void
release(struct hdr *b)
{
  struct hdr *prev = 0, *p = freelist;

  // the list is sorted, so the walk to b's place may start at the rover when
  // it lies below b: a program freeing its blocks one after another (upwards,
  // or downwards within a run of them) does not walk the whole list each time
  if(rover && rover < b){
    prev = rover;
    p = rover->next;
  }
  while(p && p < b){
    prev = p;
    p = p->next;
  }
  // merge with the following block
  if(p && b + b->units == p){
    b->units += p->units;
    b->next = p->next;
  } else {
    b->next = p;
  }
  // merge with the preceding block
  if(prev && prev + prev->units == b){
    prev->units += b->units;
    prev->next = b->next;
  } else if(prev){
    prev->next = b;
  } else {
    freelist = b;
  }
  // the next search starts next to this block (as K&R's malloc's does)
  rover = prev ? prev : b;
}

// Asks the kernel for at least `units` more units. Returns 0 when sbrk fails.
static int
grow(uint64 units)
{
  uint64 n = units < MINGROW ? MINGROW : units;
  char *p;

  if(n * UNIT > 0x7fffffff)
    return 0;
  p = sbrk(n * UNIT);
  if(p == (char *)-1){
    // not enough for a big chunk: try for exactly what is needed
    n = units;
    p = sbrk(n * UNIT);
    if(p == (char *)-1)
      return 0;
  }
  struct hdr *b = (struct hdr *)p;
  b->units = n;
  release(b);
  return 1;
}

// Hands out `units` from free block p: its tail, or all of it.
static void *
take(struct hdr *p, uint64 units)
{
  if(p->units == units){
    // unlink p: the list has no back links, and exact fits are rare
    struct hdr *prev = 0, *q = freelist;
    while(q != p){
      prev = q;
      q = q->next;
    }
    if(prev)
      prev->next = p->next;
    else
      freelist = p->next;
    rover = p->next;
  } else {
    // the head stays on the list in place
    p->units -= units;
    rover = p;
    p += p->units;
    p->units = units;
  }
  p->next = 0;
  return (void *)(p + 1);
}

void *
malloc(uint nbytes)
{
  uint64 units = (nbytes + UNIT - 1) / UNIT + 1;

  for(;;){
    // from the rover to the end, then from the start back to the rover
    struct hdr *start = rover ? rover : freelist, *p = start;
    while(p){
      if(p->units >= units)
        return take(p, units);
      p = p->next ? p->next : freelist;
      if(p == start)
        break;
    }
    if(!grow(units))
      return 0;
  }
}

void
free(void *ap)
{
  if(ap)
    release((struct hdr *)ap - 1);
}

void *
calloc(uint n, uint size)
{
  uint64 total = (uint64)n * size;
  void *p;

  if(total > 0x7fffffff)
    return 0;
  p = malloc(total);
  if(p)
    memset(p, 0, total);
  return p;
}

void *
realloc(void *old, uint n)
{
  void *p;
  uint64 have;

  if(old == 0)
    return malloc(n);
  have = (((struct hdr *)old - 1)->units - 1) * UNIT;
  if(n <= have)
    return old;
  p = malloc(n);
  if(p){
    memmove(p, old, have);
    free(old);
  }
  return p;
}
