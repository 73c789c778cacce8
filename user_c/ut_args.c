// ut_args.c: usertests for what a careless or hostile program does: bad
// system-call numbers, bad descriptors, bad user pointers (kernel
// addresses, unmapped memory, ranges running off the end of memory,
// absurd lengths) and faults in user mode. Every bad call must return -1,
// every fault must kill only the faulting process.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "procinfo.h"
#include "user.h"
#include "utests.h"

// Addresses no user pointer may reach (the last ones are filled in at run
// time: just past the break, and the break minus a few bytes).
static uint64 badaddrs[] = {
  KERNBASE, KERNBASE + 0x1000, TRAMPOLINE, TRAMPOLINE - PGSIZE, MAXVA,
  MAXVA + PGSIZE, 0x8000000000000000UL, 0xfffffffffffff000UL,
  0xffffffffffffffffUL, 0, 0,
};
#define NBAD (sizeof(badaddrs) / sizeof(badaddrs[0]))

// The break, after making sure the page below it is mapped.
static char *
heapend(void)
{
  char *end = sbrk(0);

  if((uint64)end % PGSIZE != 0)
    sbrk(PGSIZE - (uint64)end % PGSIZE);
  sbrk(PGSIZE);
  return sbrk(0);
}

static void
fillbad(void)
{
  char *end = heapend();

  badaddrs[NBAD - 2] = (uint64)end + 16 * PGSIZE;   // unmapped
  badaddrs[NBAD - 1] = (uint64)end;                 // first unmapped byte
}

// system-call numbers nobody defined
static void
badsyscall(char *s)
{
  long nums[] = { 0, 999, 1000, 100000, 0x7fffffff, -1, -22 };

  for(int i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
    if(rawsyscall(nums[i], 1, 2, 3) != -1)
      fail(s, "system call %ld did not fail", nums[i]);
}

// descriptors that are not open, out of range, or of the wrong kind
static void
badfd(char *s)
{
  int bad[] = { -1, 3 + 100, 1000, 0x7fffffff, -0x7fffffff };
  struct stat st;

  for(int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++){
    int fd = bad[i];
    if(read(fd, ubuf, 1) != -1 || write(fd, "x", 1) != -1 ||
       close(fd) != -1 || dup(fd) != -1 || fstat(fd, &st) != -1)
      fail(s, "descriptor %d was accepted", fd);
  }
  int fd = open("/echo", O_RDONLY);
  close(fd);
  if(read(fd, ubuf, 1) != -1 || close(fd) != -1)
    fail(s, "a closed descriptor still works");
}

// pointers to memory the process may not touch, for every call that
// takes a pointer
static void
badptr(char *s)
{
  int fd, fds[2], pid;
  char *argv[] = { "echo", 0, 0 };

  fillbad();
  writefile(s, "bp.file", "0123456789", 10);
  fd = open("bp.file", O_RDWR);
  for(int i = 0; i < NBAD; i++){
    char *p = (char *)badaddrs[i];
    if(read(fd, p, 10) != -1)
      fail(s, "read into %p", p);
    if(write(fd, p, 10) != -1)
      fail(s, "write from %p", p);
    if(fstat(fd, (struct stat *)p) != -1)
      fail(s, "fstat into %p", p);
    if(pipe((int *)p) != -1)
      fail(s, "pipe into %p", p);
    if(open(p, O_RDONLY) != -1 || open(p, O_CREATE | O_RDWR) != -1)
      fail(s, "open of path at %p", p);
    if(mkdir(p) != -1 || chdir(p) != -1 || unlink(p) != -1)
      fail(s, "mkdir/chdir/unlink of path at %p", p);
    if(link(p, "bp.x") != -1 || link("bp.file", p) != -1)
      fail(s, "link with path at %p", p);
    if(mknod(p, 1, 0) != -1)
      fail(s, "mknod of path at %p", p);
    if(exec(p, argv) != -1 || exec("/echo", (char **)p) != -1)
      fail(s, "exec with pointer %p", p);
    argv[1] = p;
    if(exec("/echo", argv) != -1)
      fail(s, "exec with argument pointer %p", p);
    if(procinfo((struct procinfo *)p, 4) != -1)
      fail(s, "procinfo into %p", p);
    if((pid = fork()) == 0)
      exit(0);
    if(wait((int *)p) != -1)
      fail(s, "wait into %p", p);
    wait(0);    // in case the bad wait left the child unreaped
  }
  // the bad calls allocated nothing: the next descriptor is the lowest
  if(pipe(fds) != 0 || fds[0] != fd + 1)
    fail(s, "descriptors leaked by failed calls (pipe gave %d)", fds[0]);
  close(fds[0]);
  close(fds[1]);
  close(fd);
  unlink("bp.file");
}

// valid start, but the range runs past the end of user memory; absurd
// and negative lengths
static void
badrange(char *s)
{
  char *end = heapend();
  int fd;

  writefile(s, "br.file", ubuf, 4000);
  fd = open("br.file", O_RDWR);
  if(read(fd, end - 10, 100) != -1)
    fail(s, "read running off the end of memory");
  close(fd);
  fd = open("br.file", O_RDWR);
  if(write(fd, end - 10, 100) != -1)
    fail(s, "write running off the end of memory");
  if(write(fd, ubuf, 0x7fffffff) != -1)
    fail(s, "write of 2 GiB");
  if(read(fd, ubuf, -1) != -1 || write(fd, ubuf, -1) != -1 ||
     read(fd, ubuf, -0x7fffffff) != -1)
    fail(s, "negative length accepted");
  if(fstat(fd, (struct stat *)(end - 3)) != -1)
    fail(s, "fstat running off the end of memory");
  if(procinfo((struct procinfo *)(end - sizeof(struct procinfo)), 2) != -1)
    fail(s, "procinfo running off the end of memory");
  if(procinfo((struct procinfo *)ubuf, -1) != -1)
    fail(s, "procinfo with a negative count");
  if(pipe((int *)(end - 4)) != -1)
    fail(s, "pipe running off the end of memory");
  // a path with no terminating NUL before the end of memory
  memset(end - 20, 'a', 20);
  if(open(end - 20, O_CREATE | O_RDWR) != -1 || mkdir(end - 20) != -1)
    fail(s, "unterminated path accepted");
  close(fd);
  unlink("br.file");
}

// byte buffers may sit anywhere; the kernel's structures (struct stat,
// the pipe and wait ints, procinfo rows) must be naturally aligned
static void
unaligned(char *s)
{
  char *p = (char *)(((uint64)ubuf + 64) & ~63UL);   // 64-byte aligned
  int fd, pid;

  writefile(s, "ua.file", "abcdefgh", 8);
  fd = open("ua.file", O_RDONLY);
  if(read(fd, p + 3, 8) != 8 || memcmp(p + 3, "abcdefgh", 8) != 0)
    fail(s, "read into an odd address failed");
  if(fstat(fd, (struct stat *)(p + 4)) != -1)
    fail(s, "fstat into a misaligned struct stat worked");
  if(fstat(fd, (struct stat *)(p + 8)) != 0 ||
     ((struct stat *)(p + 8))->size != 8)
    fail(s, "fstat into an aligned struct stat failed");
  close(fd);
  if(pipe((int *)(p + 2)) != -1)
    fail(s, "pipe into a misaligned array worked");
  if(procinfo((struct procinfo *)(p + 4), 1) != -1)
    fail(s, "procinfo into a misaligned row worked");
  if((pid = fork()) == 0)
    exit(3);
  if(wait((int *)(p + 1)) != -1)
    fail(s, "wait into a misaligned int worked");
  if(wait((int *)(p + 4)) != pid || *(int *)(p + 4) != 3)
    fail(s, "wait after the failed wait lost the child");
  unlink("ua.file");
}

// Runs fault number `kind` in a child; the child must be killed (-1).
static int
faulter(int kind)
{
  volatile char *p;
  void (*f)(void);

  switch(kind){
  case 0:   // load from kernel memory
    p = (char *)KERNBASE;
    return *p;
  case 1:   // store to kernel memory
    p = (char *)KERNBASE;
    *p = 1;
    return 0;
  case 2:   // load far beyond the address space
    p = (char *)0xffffffffffff0000UL;
    return *p;
  case 3:   // store just past the break
    p = sbrk(0) + 8 * PGSIZE;
    *p = 1;
    return 0;
  case 4:   // jump to unmapped memory
    f = (void (*)(void))(sbrk(0) + 64 * PGSIZE);
    f();
    return 0;
  case 5:   // an illegal instruction
    asm volatile(".word 0");
    return 0;
  case 6:   // a supervisor CSR from user mode
    asm volatile("csrr a0, sstatus" ::: "a0");
    return 0;
  case 7:   // a breakpoint
    asm volatile("ebreak");
    return 0;
  case 8:   // the trampoline page is not for user mode
    p = (char *)TRAMPOLINE;
    return *p;
  }
  return 0;
}

#define NFAULT 9

// a fault kills the faulting process only
static void
userfault(char *s)
{
  for(int kind = 0; kind < NFAULT; kind++){
    int pid = fork();
    if(pid < 0)
      fail(s, "fork failed");
    if(pid == 0){
      faulter(kind);
      exit(0);
    }
    int st = waitfor(s, pid);
    if(st != -1)
      fail(s, "fault %d: child exited %d, not killed (-1)", kind, st);
  }
}

// Uses about 1 KiB of stack per level, forever.
#pragma GCC diagnostic ignored "-Winfinite-recursion"
static int
recurse(int n)
{
  volatile char frame[1024];

  frame[0] = n;
  frame[1023] = n;
  return recurse(n + 1) + frame[0] + frame[1023];
}

// running off the bottom of the stack hits the guard page
static void
stackoverflow(char *s)
{
  int pid = fork();

  if(pid < 0)
    fail(s, "fork failed");
  if(pid == 0){
    recurse(0);
    exit(0);
  }
  if(waitfor(s, pid) != -1)
    fail(s, "stack overflow did not kill the child");
}

struct test args_quick[] = {
  { badsyscall, "badsyscall" },
  { badfd, "badfd" },
  { badptr, "badptr" },
  { badrange, "badrange" },
  { unaligned, "unaligned" },
  { userfault, "userfault" },
  { stackoverflow, "stackoverflow" },
  { 0, 0 },
};

struct test args_slow[] = {
  { 0, 0 },
};
