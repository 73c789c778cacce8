// ut_mem.c: usertests for memory: sbrk growth and shrinking, running out
// of memory (sbrk, malloc), fork copying, bss, faults after shrinking, and
// no stale translation surviving an unmap or a switch of page tables (the
// kernel flushes the TLB only when one may be stale: kernel_c/tlb.c).

#include "types.h"
#include "fcntl.h"
#include "user.h"
#include "utests.h"

// sbrk returns the old break; memory appears and disappears
static void
sbrkbasic(char *s)
{
  char *a = sbrk(0), *b;
  int pid;

  if((b = sbrk(10 * PGSIZE)) != a)
    fail(s, "sbrk returned %p, break was %p", b, a);
  if(sbrk(0) != a + 10 * PGSIZE)
    fail(s, "break did not move");
  for(int i = 0; i < 10 * PGSIZE; i += PGSIZE / 4)
    if(a[i] != 0)
      fail(s, "new memory is not zero at %d", i);
  for(int i = 0; i < 10 * PGSIZE; i++)
    a[i] = i;
  for(int i = 0; i < 10 * PGSIZE; i++)
    if(a[i] != (char)i)
      fail(s, "memory does not hold data");
  if(sbrk(-10 * PGSIZE) != a + 10 * PGSIZE || sbrk(0) != a)
    fail(s, "shrinking did not work");
  // touching memory given back kills the toucher, not the kernel
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  if(pid == 0){
    a[PGSIZE + 5] = 1;
    exit(0);
  }
  if(waitfor(s, pid) != -1)
    fail(s, "a store to freed memory did not kill the child");
  // and grown memory is zero again
  if(sbrk(PGSIZE) != a || a[5] != 0)
    fail(s, "re-grown memory is not zero");
}

// growing takes free pages, shrinking gives them back
static void
sbrkpages(char *s)
{
  int f0, f1, f2;
  char *a;

  f0 = freemem();
  if(f0 <= 64)
    fail(s, "freemem() says %d", f0);
  a = sbrk(64 * PGSIZE);
  for(int i = 0; i < 64; i++)
    a[i * PGSIZE] = 1;
  f1 = freemem();
  if(f1 > f0 - 64)
    fail(s, "64 pages took only %d free pages", f0 - f1);
  sbrk(-64 * PGSIZE);
  f2 = freemem();
  if(f2 < f1 + 64)
    fail(s, "shrinking returned only %d pages", f2 - f1);
}

// sbrk until the kernel says no: it says -1, and the process goes on
static void
sbrkrunaway(char *s)
{
  int mib = 0, pid, fds[2];
  char *p;

  for(;;){
    p = sbrk(1024 * 1024);
    if(p == (char *)-1)
      break;
    for(int i = 0; i < 1024 * 1024; i += PGSIZE)
      p[i] = 1;
    if(++mib > 100000)
      fail(s, "sbrk never failed");
  }
  if(mib < 4)
    fail(s, "only %d MiB before sbrk failed", mib);
  // the kernel is short of memory now; calls fail cleanly or work
  if((pid = fork()) == 0)
    exit(0);
  if(pid > 0)
    waitfor(s, pid);
  if(pipe(fds) == 0){
    close(fds[0]);
    close(fds[1]);
  }
  // giving memory back makes it usable again
  sbrk(-8 * 1024 * 1024);
  if(pipe(fds) != 0)
    fail(s, "pipe fails after freeing 8 MiB");
  close(fds[0]);
  close(fds[1]);
  if(sbrk(16 * PGSIZE) == (char *)-1)
    fail(s, "sbrk fails after freeing 8 MiB");
}

// arguments sbrk must refuse
static void
sbrkargs(char *s)
{
  char *a = sbrk(0);

  if(sbrk(0x7fffffff) != (char *)-1)
    fail(s, "sbrk(2 GiB) did not fail");
  if(sbrk(-(int)(uint64)a - 2 * PGSIZE) != (char *)-1)
    fail(s, "shrinking below zero did not fail");
  if(sbrk(0) != a)
    fail(s, "a failed sbrk moved the break");
  // read() into brand-new heap memory
  char *p = sbrk(3 * PGSIZE);
  int fd = open("/echo", O_RDONLY);
  if(fd < 0 || read(fd, p + 100, 2 * PGSIZE) != 2 * PGSIZE)
    fail(s, "read into new heap failed");
  close(fd);
}

// malloc until it returns 0; free; malloc works again
static void
mallocall(char *s)
{
  void **blocks = 0, **b;
  int n = 0;

  while((b = malloc(64 * 1024)) != 0){
    *b = blocks;
    blocks = b;
    n++;
  }
  if(n < 16)
    fail(s, "only %d blocks of 64 KiB", n);
  while(blocks){
    b = *blocks;
    free(blocks);
    blocks = b;
  }
  if((b = malloc(n / 2 * 64 * 1024)) == 0)
    fail(s, "cannot malloc half of it after freeing everything");
  free(b);
}

// fork copies memory: each side sees only its own writes
static void
forkcopy(char *s)
{
  static int shared[2000];
  int fds[2], pid;
  char c;

  for(int i = 0; i < 2000; i++)
    shared[i] = i;
  if(pipe(fds) < 0 || (pid = fork()) < 0)
    fail(s, "pipe/fork failed");
  if(pid == 0){
    for(int i = 0; i < 2000; i++)
      shared[i] = -i;
    read(fds[0], &c, 1);
    exit(shared[1999] == -1999 ? 0 : 1);
  }
  for(int i = 0; i < 2000; i++)
    if(shared[i] != i)
      fail(s, "child's write changed the parent at %d", i);
  shared[1999] = 5;
  write(fds[1], "x", 1);
  if(waitfor(s, pid) != 0)
    fail(s, "parent's write changed the child");
}

static char bss[20000];

// uninitialised data starts zero
static void
bsstest(char *s)
{
  for(int i = 0; i < sizeof(bss); i++)
    if(bss[i] != 0)
      fail(s, "bss[%d] is %d", i, bss[i]);
}

// ---------------------------------------------------------------- slow

// many processes each holding memory until memory or processes run out;
// killing them gives everything back
static void
memfork(char *s)
{
  int pids[256], n = 0, fds[2];
  char c;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  for(; n < 256; n++){
    if((pids[n] = fork()) < 0)
      break;
    if(pids[n] == 0){
      char *p = sbrk(4 * 1024 * 1024);
      if(p != (char *)-1)
        for(int i = 0; i < 4 * 1024 * 1024; i += PGSIZE)
          p[i] = 1;
      write(fds[1], p == (char *)-1 ? "n" : "y", 1);
      for(;;)
        sleep(100);
    }
    if(read(fds[0], &c, 1) != 1)
      fail(s, "child %d said nothing", n);
    if(c == 'n'){
      n++;
      break;
    }
  }
  for(int i = 0; i < n; i++)
    kill(pids[i]);
  for(int i = 0; i < n; i++)
    if(waitfor(s, pids[i]) != -1)
      fail(s, "child %d was not killed", i);
  close(fds[0]);
  close(fds[1]);
}

// A page this process just used, then gave back, must fault at once, for a
// load and for a store: no translation of it may outlive the unmap.
static void
tlbshrink(char *s)
{
  for(int store = 0; store < 2; store++){
    int pid = fork();
    if(pid < 0)
      fail(s, "fork failed");
    if(pid == 0){
      volatile char *a = sbrk(PGSIZE);
      a[7] = 7;                      // the translation is in the TLB now
      if(a[7] != 7)
        exit(2);
      sbrk(-PGSIZE);
      if(store)
        a[7] = 1;
      else if(a[7] == 7)
        exit(3);                     // read the freed page
      exit(4);
    }
    int st = waitfor(s, pid);
    if(st != -1)
      fail(s, "a %s of a page given back was not killed (exit %d)",
           store ? "store" : "load", st);
  }
}

// What the process stores at an address, the kernel reads there (a
// stale translation would send the store to the page mapped before).
static void
sameview(char *s, int fds[2], volatile char *a, char want)
{
  char got = 0;

  *a = want;
  if(write(fds[1], (char *)a, 1) != 1 || read(fds[0], &got, 1) != 1)
    fail(s, "pipe failed");
  if(got != want)
    fail(s, "the kernel reads %d where the process stored %d", got, want);
}

// Shrink two pages and grow them back: the allocator hands the pages back
// crosswise, so a translation kept from before points at the wrong one.
static void
tlbregrow(char *s)
{
  int fds[2];
  volatile char *a = sbrk(0);

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  sbrk(2 * PGSIZE);
  for(int round = 1; round <= 20; round++){
    sameview(s, fds, a, round);
    sameview(s, fds, a + PGSIZE, -round);
    sbrk(-2 * PGSIZE);
    if(sbrk(2 * PGSIZE) != (char *)a)
      fail(s, "sbrk moved");
    if(a[0] != 0 || a[PGSIZE] != 0)
      fail(s, "re-grown memory is not zero");
  }
  close(fds[0]);
  close(fds[1]);
}

// A parent and a child, ping-ponging through pipes (on one hart or on
// several), each see their own page at the same address, and their own
// page again after shrinking and re-growing it.
static void
tlbpingpong(char *s)
{
  int to[2], from[2], me, pid;
  volatile char *a = sbrk(0);
  char c = 0;

  if(pipe(to) < 0 || pipe(from) < 0)
    fail(s, "pipe failed");
  sbrk(PGSIZE);
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  me = pid == 0 ? 'c' : 'p';
  *a = me;
  for(int i = 0; i < 200; i++){
    if(pid == 0){
      if(read(to[0], &c, 1) != 1 || write(from[1], &c, 1) != 1)
        exit(2);
    } else if(write(to[1], &c, 1) != 1 || read(from[0], &c, 1) != 1){
      fail(s, "pipe failed");
    }
    if(*a != me){
      if(pid == 0)
        exit(3);
      fail(s, "the parent sees %d, not its own page", *a);
    }
    if(i % 10 == 0){            // a new page at the same address
      sbrk(-PGSIZE);
      sbrk(PGSIZE);
      if(*a != 0){
        if(pid == 0)
          exit(4);
        fail(s, "re-grown memory is not zero");
      }
      *a = me;
    }
  }
  if(pid == 0)
    exit(0);
  if(waitfor(s, pid) != 0)
    fail(s, "the child saw another page");
}

// Deep recursion: every frame holds a page-sized array, so the stack
// reaches pages exec only reserved (kernel_c/vm.c, uvmlazy).
static int
deep(int n)
{
  volatile char frame[PGSIZE];

  frame[0] = n;
  frame[PGSIZE - 1] = n;
  if(n > 0 && deep(n - 1) != n - 1)
    return -1;
  return frame[0] == (char)n && frame[PGSIZE - 1] == (char)n ? n : -1;
}

// The kernel writes into stack pages never touched yet (read() into a big
// local buffer), and a child forked then sees the parent's pages.
static int
lazyread(char *s, int fds[2])
{
  char buf[8 * PGSIZE];
  int pid, st;

  for(int i = 0; i < 8; i++){
    char c = 'a' + i;
    if(write(fds[1], &c, 1) != 1 ||
       read(fds[0], buf + i * PGSIZE + 100, 1) != 1)
      fail(s, "pipe failed");
  }
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  for(int i = 0; i < 8; i++)
    if(buf[i * PGSIZE + 100] != 'a' + i){
      if(pid == 0)
        exit(2);
      fail(s, "the kernel's store into stack page %d is lost", i);
    }
  if(pid == 0)
    exit(0);
  if((st = waitfor(s, pid)) != 0)
    fail(s, "the child does not see the parent's stack (exit %d)", st);
  return buf[100];
}

static void
lazystack(char *s)
{
  int fds[2], pid;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  for(int round = 0; round < 2; round++){   // the second time, all mapped
    if(lazyread(s, fds) != 'a')
      fail(s, "lazyread");
    if(deep(USERSTACK - 4) != USERSTACK - 4)
      fail(s, "deep recursion lost its frames");
  }
  // a fork after the stack grew: the child recurses through copied pages
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  if(pid == 0)
    exit(deep(USERSTACK - 4) == USERSTACK - 4 ? 0 : 1);
  if(waitfor(s, pid) != 0)
    fail(s, "the child's deep recursion failed");
  close(fds[0]);
  close(fds[1]);
}

// A child that used up all memory and then grows its stack is killed (the
// kernel says it is out of memory for a stack page), and its memory comes
// back.
static void
lazystackoom(char *s)
{
  int pid, fds[2];

  if((pid = fork()) < 0)
    fail(s, "fork failed");
  if(pid == 0){
    while(sbrk(1024 * 1024) != (char *)-1)
      ;
    while(sbrk(PGSIZE) != (char *)-1)
      ;
    deep(USERSTACK - 4);   // needs 12 more pages: there are none
    exit(3);
  }
  if(waitfor(s, pid) != -1)
    fail(s, "the child was not killed when its stack could not grow");
  if(pipe(fds) != 0)
    fail(s, "pipe fails after the child's memory came back");
  close(fds[0]);
  close(fds[1]);
}

struct test mem_quick[] = {
  { sbrkbasic, "sbrkbasic" },
  { sbrkpages, "sbrkpages" },
  { sbrkrunaway, "sbrkrunaway" },
  { sbrkargs, "sbrkargs" },
  { mallocall, "mallocall" },
  { forkcopy, "forkcopy" },
  { bsstest, "bss" },
  { tlbshrink, "tlbshrink" },
  { tlbregrow, "tlbregrow" },
  { tlbpingpong, "tlbpingpong" },
  { lazystack, "lazystack" },
  { lazystackoom, "lazystackoom" },
  { 0, 0 },
};

struct test mem_slow[] = {
  { memfork, "memfork" },
  { 0, 0 },
};
