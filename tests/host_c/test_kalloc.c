// test_kalloc.c: kernel_c/kalloc.c on the host: an arena of pages stands in
// for RAM after the kernel image (`end` is renamed k_end on the command
// line), the spinlock is a checked stub. Every page is handed out once,
// fresh pages are zero, freed pages are junk-filled and reused first,
// exhaustion returns 0, nfree always matches, kfree of anything kalloc()
// did not return panics, and a shared page (kshare) is freed only by its
// last owner.

#include "hostk.h"
#include "param.h"
#include "memlayout.h"
#include "spinlock.h"
#include "riscv.h"
#include "defs.h"

#define NPAGES 257
#define NREF 1                   // the reference counts: a byte a page, first
#define NMANAGED (NPAGES - NREF) // pages kalloc hands out

// the "RAM" after the kernel image: k_end must be an array (kalloc.c
// declares `extern char end[]`)
__attribute__((aligned(4096))) char k_end[NPAGES * PGSIZE];
uint64 phystop;

static int held;

void
initlock(struct spinlock *lk, char *name)
{
  lk->locked = 0;
  lk->name = name;
}

void
acquire(struct spinlock *lk)
{
  CHECK(!lk->locked, "acquire of a held lock %s", lk->name);
  lk->locked = 1;
  held++;
}

void
release(struct spinlock *lk)
{
  CHECK(lk->locked, "release of a free lock %s", lk->name);
  lk->locked = 0;
  held--;
}

static char *out[NPAGES];   // outstanding pages, by index in the arena
static int nout;

static int
index_of(void *pa)
{
  return ((char *)pa - k_end) / PGSIZE;
}

static int
all_bytes(char *p, int c, int from)
{
  for(int i = from; i < PGSIZE; i++)
    if(p[i] != c)
      return 0;
  return 1;
}

int
main(void)
{
  char *p, *first;

  phystop = (uint64)k_end + NPAGES * PGSIZE;
  kinit();
  CHECK(kfreepages() == NMANAGED, "%lu free pages at start", kfreepages());
  CHECK(ktotalpages() == NMANAGED, "%lu pages managed", ktotalpages());

  // everything, then nothing
  for(int i = 0; i < NMANAGED; i++){
    p = kalloc();
    CHECK(p != 0, "kalloc %d returned 0", i);
    if(!p)
      break;
    CHECK((uint64)p % PGSIZE == 0, "page %p not aligned", p);
    CHECK(p >= k_end + NREF * PGSIZE && p < (char *)phystop,
          "page %p outside the arena (or on the counts)", p);
    CHECK(out[index_of(p)] == 0, "page %p handed out twice", p);
    CHECK(all_bytes(p, 0, 0), "fresh page %p is not zero", p);
    out[index_of(p)] = p;
    k_memset(p, 0xAB, PGSIZE);   // the caller owns all of it
    nout++;
  }
  CHECK(kfreepages() == 0, "%lu free pages after taking all", kfreepages());
  CHECK(kalloc() == 0, "kalloc with nothing left");
  CHECK(kalloc() == 0, "kalloc with nothing left, again");
  CHECK(kfreepages() == 0, "exhaustion changed nfree");

  // give back in a scrambled order; junk-filled
  hk_seed(7);
  for(int i = NPAGES - 1; i > 0; i--){
    int j = hk_rand() % (i + 1);
    char *t = out[i]; out[i] = out[j]; out[j] = t;
  }
  // (out[] is by arena index: compact the NMANAGED pages to the front)
  for(int i = 0, n = 0; i < NPAGES; i++)
    if(out[i]){
      char *t = out[i]; out[i] = 0; out[n++] = t;
    }
  for(int i = 0; i < NMANAGED; i++){
    kfree(out[i]);
    // (the first word links the free list)
    CHECK(all_bytes(out[i], 1, sizeof(void *)), "freed page %p is not junk-filled", out[i]);
    CHECK(kfreepages() == i + 1, "nfree %lu after %d frees", kfreepages(), i + 1);
  }
  k_memset(out, 0, sizeof(out));
  nout = 0;

  // the free list is reused first, last freed first
  first = kalloc();
  CHECK(first != 0, "kalloc after frees");
  kfree(first);
  CHECK(kalloc() == first, "the page just freed comes back first");
  kfree(first);

  // bad frees panic and change nothing
  uint64 before = kfreepages();
  EXPECT_PANIC(kfree(k_end + 1));                    // not page-aligned
  EXPECT_PANIC(kfree(k_end - PGSIZE));               // below the managed RAM
  EXPECT_PANIC(kfree(k_end));                        // the counts' page
  EXPECT_PANIC(kfree((char *)phystop));              // past the end
  EXPECT_PANIC(kfree((char *)phystop + PGSIZE));
  CHECK(kfreepages() == before, "a refused kfree changed nfree");
  CHECK(held == 0, "a lock stayed held after a panic: %d", held);
  held = 0;

  // a shared page: freed by its last owner only; kfree while shared panics
  p = kalloc();
  before = kfreepages();
  kshare(p);
  kshare(p);
  EXPECT_PANIC(kfree(p));
  CHECK(kunshare(p) == 1, "kunshare with three owners");
  CHECK(kunshare(p) == 1, "kunshare with two owners");
  CHECK(kunshare(p) == 0, "kunshare of the last owner");
  CHECK(kfreepages() == before, "sharing changed nfree");
  kfree(p);
  CHECK(kfreepages() == before + 1, "the last owner's kfree");
  EXPECT_PANIC(kfree(p));                            // twice
  CHECK(held == 0, "a lock stayed held: %d", held);
  held = 0;

  // random traffic against a model
  for(int step = 0; step < 200000; step++){
    if(hk_rand() % 2 && nout < NMANAGED){
      p = kalloc();
      CHECK(p != 0 || kfreepages() == 0, "kalloc 0 with %lu free", kfreepages());
      if(p){
        CHECK(out[index_of(p)] == 0, "page %p handed out twice", p);
        out[index_of(p)] = p;
        nout++;
        p[hk_rand() % PGSIZE] = 42;
      }
    } else if(nout > 0){
      int i;
      do
        i = hk_rand() % NPAGES;
      while(out[i] == 0);
      kfree(out[i]);
      out[i] = 0;
      nout--;
    }
    if(kfreepages() != NMANAGED - nout){
      CHECK(0, "nfree %lu, want %d", kfreepages(), NMANAGED - nout);
      break;
    }
  }
  CHECK(held == 0, "locks held at the end: %d", held);
  return hk_done("kalloc");
}
