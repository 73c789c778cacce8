// usertests: the kernel's self-test, run from inside the guest.
//
//   usertests          all tests (quick, then slow)
//   usertests -q       quick tests only (what the default pytest suite runs)
//   usertests NAME...  only the named tests
//   usertests -l       list the tests
//
// Each test runs in its own forked process and passes when that process
// exits 0. Around every test the driver compares freemem() before and
// after, so a test that leaks physical pages fails too. Prints "test NAME:
// OK" or "test NAME: FAILED ...", then "ALL TESTS PASSED" (exit 0) or
// "SOME TESTS FAILED: names" (exit 1).
//
// Several tests make user programs fault on purpose; the kernel's messages
// about killed processes are expected noise.

#include "types.h"
#include "fcntl.h"
#include "user.h"
#include "utests.h"

char ubuf[8192];

void
fail(char *s, char *fmt, ...)
{
  char msg[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  printf("%s: %s\n", s, msg);
  exit(1);
}

// Children reaped by waitfor() while it looked for another one.
static struct { int pid, status; } early[64];
static int nearly;

// Waits for child pid and returns its exit status. Other children that
// exit first are remembered, so they can be waited for in any order.
int
waitfor(char *s, int pid)
{
  int st, r;

  for(int i = 0; i < nearly; i++){
    if(early[i].pid == pid){
      st = early[i].status;
      early[i] = early[--nearly];
      return st;
    }
  }
  while((r = wait(&st)) >= 0){
    if(r == pid)
      return st;
    if(nearly < 64){
      early[nearly].pid = r;
      early[nearly++].status = st;
    }
  }
  fail(s, "wait lost child %d", pid);
}

// A system call with any number, for the bad-number tests.
long
rawsyscall(long num, long a0, long a1, long a2)
{
  register long r7 asm("a7") = num;
  register long r0 asm("a0") = a0;
  register long r1 asm("a1") = a1;
  register long r2 asm("a2") = a2;

  asm volatile("ecall" : "+r"(r0) : "r"(r7), "r"(r1), "r"(r2) : "memory");
  return r0;
}

void
writefile(char *s, char *path, char *data, int n)
{
  int fd = open(path, O_CREATE | O_WRONLY | O_TRUNC);

  if(fd < 0)
    fail(s, "cannot create %s", path);
  if(write(fd, data, n) != n)
    fail(s, "write %s failed", path);
  close(fd);
}

// Reads up to max bytes of path into buf; returns the count.
int
readfile(char *s, char *path, char *buf, int max)
{
  int fd = open(path, O_RDONLY), n, total = 0;

  if(fd < 0)
    fail(s, "cannot open %s", path);
  while(total < max && (n = read(fd, buf + total, max - total)) > 0)
    total += n;
  close(fd);
  return total;
}

// ------------------------------------------------------------------ driver

static struct test *quick[] = {
  proc_quick, fs_quick, mem_quick, args_quick, ulib_quick,
};
static struct test *slow[] = {
  proc_slow, fs_slow, mem_slow, args_slow, ulib_slow,
};
#define NTABLE (sizeof(quick) / sizeof(quick[0]))

static char failed[1024];   // names of failed tests

// Free pages now, after giving exiting orphans (re-parented to init) a
// moment to be reaped when the count is still below `want`.
static int
settledfree(int want)
{
  int n = freemem();

  for(int i = 0; i < 20 && n < want; i++){
    sleep(2);
    n = freemem();
  }
  return n;
}

// Runs one test in a child. Returns 1 if it passed.
static int
run(struct test *t)
{
  int pid, st, before, after;

  printf("test %s: ", t->s);
  before = freemem();
  if((pid = fork()) < 0){
    printf("FAILED (cannot fork)\n");
    return 0;
  }
  if(pid == 0){
    t->f(t->s);
    exit(0);
  }
  st = waitfor(t->s, pid);
  after = settledfree(before);
  if(st != 0){
    printf("test %s: FAILED (exit status %d)\n", t->s, st);
    return 0;
  }
  if(after < before){
    printf("test %s: FAILED (lost %d free pages)\n", t->s, before - after);
    return 0;
  }
  printf("OK\n");
  return 1;
}

static int
wanted(struct test *t, int argc, char **argv, int first)
{
  if(first >= argc)
    return 1;
  for(int i = first; i < argc; i++)
    if(strcmp(argv[i], t->s) == 0)
      return 1;
  return 0;
}

// Runs the wanted tests of the given tables; returns the number that failed.
static int
runtables(struct test **tables, int argc, char **argv, int first, int *nrun)
{
  int nfail = 0;

  for(int i = 0; i < NTABLE; i++){
    for(struct test *t = tables[i]; t->f; t++){
      if(!wanted(t, argc, argv, first))
        continue;
      (*nrun)++;
      if(!run(t)){
        nfail++;
        if(strlen(failed) + strlen(t->s) + 2 < sizeof(failed)){
          strcat(failed, " ");
          strcat(failed, t->s);
        }
      }
    }
  }
  return nfail;
}

static void
list(void)
{
  for(int i = 0; i < NTABLE; i++)
    for(struct test *t = quick[i]; t->f; t++)
      printf("%s\n", t->s);
  for(int i = 0; i < NTABLE; i++)
    for(struct test *t = slow[i]; t->f; t++)
      printf("%s (slow)\n", t->s);
}

int
main(int argc, char *argv[])
{
  int first = 1, quickonly = 0, nfail, nrun = 0, free0, free1;

  if(argc > 1 && strcmp(argv[1], "-l") == 0){
    list();
    return 0;
  }
  if(argc > 1 && strcmp(argv[1], "-q") == 0){
    quickonly = 1;
    first = 2;
  }
  if(first < argc && argv[first][0] == '-'){
    fprintf(2, "usage: usertests [-q] [-l] [TEST...]\n");
    return 2;
  }
  printf("usertests starting\n");
  free0 = freemem();
  nfail = runtables(quick, argc, argv, first, &nrun);
  if(!quickonly)
    nfail += runtables(slow, argc, argv, first, &nrun);
  free1 = settledfree(free0);
  if(nrun == 0){
    printf("usertests: no such test (usertests -l lists them)\n");
    return 2;
  }
  if(free1 < free0){
    printf("FAILED -- lost %d free pages (%d before, %d after)\n",
           free0 - free1, free0, free1);
    return 1;
  }
  if(nfail > 0){
    printf("SOME TESTS FAILED:%s\n", failed);
    return 1;
  }
  printf("ALL TESTS PASSED (%d tests)\n", nrun);
  return 0;
}
