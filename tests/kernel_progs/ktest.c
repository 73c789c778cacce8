// ktest: kernel robustness checks, run in the guest by tests/test_kernel.py
// (which compiles this file and puts it in a scratch file-system image).
//
//   ktest args          every system call with bad pointers, lengths, fds,
//                       flags and numbers: each must return -1, and no
//                       memory may leak
//   ktest fuzz SEED N   N children each make 60 random system calls with
//                       hostile arguments; the kernel must survive and get
//                       every page back
//   ktest forkbomb      fork until fork() fails (flat, then a fork tree);
//                       everything is reclaimed
//   ktest sbrkbomb      three processes grow until sbrk() fails; the
//                       system stays usable and gets every page back
//   ktest badelf        exec of malformed ELF files fails cleanly
//   ktest kill          kill() ends sleeps in sleep, pipes and wait
//   ktest fault KIND    one user fault (load store exec illegal ebreak):
//                       the child dies, we report its status
//   ktest time          time_us, uptime and sleep agree
//   ktest preempt       after the CPU idled with only a long sleep()'s wake-up
//                       armed, a process woken by console input (the test
//                       types a line) is still preempted
//
// Each prints "ktest NAME: OK ..." (exit 0) or "ktest NAME: FAIL ..."
// (exit 1).

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "param.h"
#include "syscall.h"
#include "procinfo.h"
#include "elf.h"
#include "riscv.h"
#include "vmlayout.h"
#include "user.h"

static char *name = "?";
static int nfail;
static uint64 brk0;             // the break when main started
static char buf[3 * PGSIZE];    // a valid, writable buffer

static void
failf(char *what, long got)
{
  printf("ktest %s: FAIL %s (got %ld)\n", name, what, got);
  nfail++;
}

static long
sys(long num, long a0, long a1, long a2, long a3)
{
  register long r7 asm("a7") = num;
  register long r0 asm("a0") = a0;
  register long r1 asm("a1") = a1;
  register long r2 asm("a2") = a2;
  register long r3 asm("a3") = a3;

  asm volatile("ecall" : "+r"(r0) : "r"(r7), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
  return r0;
}

// expect -1 from a call
#define BAD(what, call) do { \
    long r_ = (long)(call); \
    if(r_ != -1) \
      failf(what, r_); \
    checks++; \
  } while(0)

static int checks;

static int
finish(char *fmt, long a, long b)
{
  if(nfail)
    exit(1);
  printf("ktest %s: OK ", name);
  printf(fmt, a, b);
  printf("\n");
  exit(0);
}

// addresses no system call may accept
static uint64
badaddr(int i)
{
  uint64 guard = brk0 - (USERSTACK + 1) * PGSIZE;
  uint64 v[] = {
    0x80000000UL,               // kernel text
    0x80001000UL,
    TRAPFRAME,                  // mapped, but not for the user
    TRAMPOLINE,
    MAXVA - 1,
    MAXVA,
    1UL << 63,
    ~0UL,
    0xffffffffffff0000UL,
    guard,                      // the stack guard page
    guard + PGSIZE - 8,
    PGROUNDUP(brk0) + 16 * PGSIZE, // beyond the break
  };
  if(i >= sizeof(v) / sizeof(v[0]))
    return 0;
  return v[i];
}

static void
args(void)
{
  int fd, pid, st;
  uint64 a, text = (uint64)args;
  char *argv[MAXARG + 2];
  long free0;

  name = "args";
  mkdir("/kt");
  if((fd = open("/kt/f", O_CREATE | O_RDWR)) < 0 || write(fd, "0123456789", 10) != 10)
    failf("cannot make /kt/f", fd);
  free0 = freemem();
  argv[0] = "echo";
  argv[1] = 0;

  for(int i = 0; (a = badaddr(i)) != 0; i++){
    BAD("read into bad", read(fd, (char*)a, 10));
    BAD("write from bad", write(1, (char*)a, 10));
    BAD("pipe bad", pipe((int*)a));
    BAD("fstat bad", fstat(fd, (struct stat*)a));
    BAD("exec bad path", exec((char*)a, argv));
    BAD("exec bad argv", exec("/echo", (char**)a));
    BAD("open bad path", open((char*)a, O_RDONLY));
    BAD("mkdir bad path", mkdir((char*)a));
    BAD("unlink bad path", unlink((char*)a));
    BAD("chdir bad path", chdir((char*)a));
    BAD("link bad old", link((char*)a, "/kt/g"));
    BAD("link bad new", link("/kt/f", (char*)a));
    BAD("mknod bad path", mknod((char*)a, 1, 0));
    BAD("procinfo bad", procinfo((struct procinfo*)a, 2));
    argv[0] = "echo";
    argv[1] = (char*)a;
    argv[2] = 0;
    BAD("exec bad argv[1]", exec("/echo", argv));
  }

  // read-only memory (text) is a bad destination
  BAD("read into text", read(fd, (char*)text, 4));
  BAD("fstat into text", fstat(fd, (struct stat*)(text & ~7UL)));
  BAD("pipe into text", pipe((int*)(text & ~7UL)));

  // lengths: negative, huge, and ranges running off the end of memory
  BAD("read n=-1", read(fd, buf, -1));
  BAD("write n=-5", write(1, buf, -5));
  BAD("read n=2^31-1", read(fd, buf, 0x7fffffff));
  BAD("write n=2^31-1", write(1, buf, 0x7fffffff));
  BAD("read past the break", read(fd, sbrk(0) - 4, 10));
  BAD("write past the break", write(1, sbrk(0) - 4, 10));
  BAD("procinfo n=-1", procinfo((struct procinfo*)buf, -1));
  BAD("sleep -1", sleep(-1));

  // unaligned struct pointers
  BAD("fstat unaligned", fstat(fd, (struct stat*)(buf + 1)));
  BAD("pipe unaligned", pipe((int*)(buf + 2)));
  BAD("procinfo unaligned", procinfo((struct procinfo*)(buf + 4), 1));

  // a path without a NUL before unmapped memory
  char *end = sbrk(0);
  sbrk(PGSIZE);
  memset(end, 'a', PGSIZE);
  BAD("open unterminated path", open(end, O_RDONLY));
  BAD("path longer than MAXPATH", open(memset(buf, 'b', MAXPATH + 1), O_RDONLY));
  buf[MAXPATH + 1] = 0;
  // argv running off the heap
  char **av = (char**)(end + PGSIZE - 16);
  av[0] = "echo";
  av[1] = "x";
  BAD("unterminated argv", exec("/echo", av));
  sbrk(-PGSIZE);
  for(int i = 0; i <= MAXARG; i++)
    argv[i] = "x";
  argv[MAXARG + 1] = 0;
  BAD("MAXARG+1 arguments", exec("/echo", argv));

  // file descriptors
  int badfds[] = { -1, NOFILE, NOFILE + 1, 1000, 0x7fffffff, -0x7fffffff };
  for(int i = 0; i < sizeof(badfds) / sizeof(badfds[0]); i++){
    BAD("read bad fd", read(badfds[i], buf, 1));
    BAD("write bad fd", write(badfds[i], buf, 1));
    BAD("close bad fd", close(badfds[i]));
    BAD("dup bad fd", dup(badfds[i]));
    BAD("fstat bad fd", fstat(badfds[i], (struct stat*)buf));
  }
  BAD("read closed fd", read(15, buf, 1));
  int rfd = open("/kt/f", O_RDONLY);
  BAD("write to read-only fd", write(rfd, "x", 1));
  close(rfd);
  int wfd = open("/kt/f", O_WRONLY);
  BAD("read from write-only fd", read(wfd, buf, 1));
  close(wfd);

  // flags, modes and names
  BAD("open mode 3", open("/kt/f", 3));
  BAD("open unknown flag", open("/kt/f", 0x1000));
  BAD("open dir for writing", open("/kt", O_RDWR));
  BAD("open missing", open("/kt/nope", O_RDONLY));
  BAD("mknod major -1", mknod("/kt/d1", -1, 0));
  BAD("mknod major NDEV", mknod("/kt/d2", NDEV, 0));
  BAD("mkdir existing", mkdir("/kt"));
  BAD("unlink .", unlink("/kt/."));
  BAD("unlink ..", unlink("/kt/.."));
  BAD("unlink non-empty dir", unlink("/kt"));
  BAD("link to dir", link("/kt", "/kt2"));
  BAD("chdir to file", chdir("/kt/f"));
  BAD("exec a directory", exec("/kt", argv));
  BAD("exec a text file", exec("/kt/f", argv));

  // processes
  BAD("kill -1", kill(-1));
  BAD("kill 0", kill(0));
  BAD("kill init", kill(1));
  BAD("kill missing pid", kill(999999));
  BAD("wait without children", wait(0));
  BAD("ignintr 2", sys(SYS_ignintr, 2, 0, 0, 0));
  BAD("sbrk 2 GiB", (long)sbrk(0x7fffffff));
  BAD("sbrk below zero", (long)sbrk(-(int)(brk0 + 2 * PGSIZE)));
  BAD("sbrk into the stack", (long)sbrk(-(int)(sbrk(0) - (char*)brk0) - 8));
  if((pid = fork()) == 0)
    exit(7);
  for(int i = 0; (a = badaddr(i)) != 0; i++)
    BAD("wait bad", sys(SYS_wait, a, 0, 0, 0));
  BAD("wait into text", sys(SYS_wait, text & ~7UL, 0, 0, 0));
  BAD("wait unaligned", sys(SYS_wait, (uint64)buf + 1, 0, 0, 0));
  if(wait(&st) != pid || st != 7)
    failf("child not reaped after the failed waits", st);

  // numbers
  long nums[] = { 0, 27, 29, 41, 100, 1000, 1L << 31, -1, -22, 1L << 40 };
  for(int i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
    BAD("bad syscall number", sys(nums[i], 0, 0, 0, 0));

  close(fd);
  if(freemem() != free0)
    failf("pages leaked by failed calls", free0 - freemem());
  finish("%d checks", checks, 0);
}

// Wait (up to a second) for free memory to come back to free0: orphans
// re-parented to init are reaped by init, a little later.
static long
settle(long free0)
{
  for(int i = 0; i < 100 && freemem() != free0; i++)
    sleep(1);
  return freemem();
}

// ---------------------------------------------------------------- fuzz

static uint64 rng;
static char *heap0;             // fuzz children's own heap pages (never the stack)

static uint64
rnd(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static char *names[] = { "a", "b", "d", "d/e", "..", ".", "", "d/e/f", "a.b" };

static long
fuzzarg(void)
{
  static long small[] = { 0, 1, 2, 3, -1, -2, 15, 16, 64, 4096, 0x7fffffff,
                          -0x80000000L };
  switch(rnd() % 6){
  case 0:
    return small[rnd() % (sizeof(small) / sizeof(small[0]))];
  case 1:
    return badaddr(rnd() % 12);
  case 2:
    return (long)(buf + rnd() % sizeof(buf));
  case 3:
    return (long)names[rnd() % (sizeof(names) / sizeof(names[0]))];
  case 4:
    // near the end of the heap pages: valid, straddling, or (after a
    // shrinking sbrk) unmapped; never the stack, which sits below them
    return (long)(heap0 + 2 * PGSIZE - (rnd() % (2 * PGSIZE + 64)) + 32);
  default:
    return rnd();
  }
}

// one child's random calls; never halt, never kill a real pid, never block
// on the console or for long
static void
fuzzchild(void)
{
  long num, a[4], r;

  close(0);
  close(1);
  close(2);
  heap0 = sbrk(2 * PGSIZE);
  for(int i = 0; i < 60; i++){
    num = rnd() % (SYS_ignintr + 3);
    for(int j = 0; j < 4; j++)
      a[j] = fuzzarg();
    switch(num){
    case SYS_halt:
      continue;
    case SYS_exit:
      exit(0);
    case SYS_kill:
      a[0] = (long[]){ -1, 0, 1, 999999 }[rnd() % 4];
      break;
    case SYS_sleep:
      a[0] %= 3;
      break;
    case SYS_mknod:
      a[1] = (long[]){ -1, 0, NDEV, 1000 }[rnd() % 4];
      break;
    case SYS_read:
      if(a[0] == 0)
        a[0] = 3;
      break;
    case SYS_sbrk:
      a[0] %= 4 * 1024 * 1024;
      break;
    }
    r = sys(num, a[0], a[1], a[2], a[3]);
    if(num == SYS_pipe && r == 0){
      // a pipe we hold both ends of would block read and write forever
      close(((int*)a[0])[0]);
      close(((int*)a[0])[1]);
    }
    if(num == SYS_fork && r == 0)
      exit(0);
    if(num == SYS_exec && r >= 0)
      exit(0);  // not reached: exec replaced us
  }
  exit(0);
}

static void
fuzz(int seed, int n)
{
  long free0;
  int st, pid;

  name = "fuzz";
  mkdir("/fz");
  chdir("/fz");
  mkdir("d");
  rng = 0x9E3779B97F4A7C15UL ^ (uint64)seed;
  for(int i = 0; i < sizeof(buf); i++)
    buf[i] = "abd/e.\0"[rnd() % 7];
  free0 = freemem();
  for(int i = 0; i < n; i++){
    rnd();
    if((pid = fork()) < 0){
      failf("fork failed", i);
      break;
    }
    if(pid == 0)
      fuzzchild();
    while(wait(&st) >= 0)
      ;
  }
  if(settle(free0) != free0)
    failf("pages leaked", free0 - freemem());
  finish("%d children, seed %d", n, seed);
}

// ---------------------------------------------------------------- bombs

static void
forkbomb(void)
{
  int fds[2], n = 0, pid, st;
  long free0;
  char c;

  name = "forkbomb";
  free0 = freemem();
  // flat: children wait on a pipe until we are done
  pipe(fds);
  for(;;){
    if((pid = fork()) < 0)
      break;
    if(pid == 0){
      close(fds[1]);
      read(fds[0], &c, 1);
      exit(0);
    }
    if(++n > NPROC)
      break;
  }
  if(n < 10 || n > NPROC)
    failf("unexpected number of forks", n);
  close(fds[0]);
  close(fds[1]);
  while(wait(0) >= 0)
    ;
  // a tree: every process forks until the table is full, then waits for
  // its children and exits
  if((pid = fork()) == 0){
    for(int i = 0; i < 2 * NPROC; i++){
      if(fork() < 0)
        break;
    }
    while(wait(0) >= 0)
      ;
    exit(0);
  }
  if(wait(&st) != pid || st != 0)
    failf("fork tree did not finish", st);
  if(settle(free0) != free0)
    failf("pages leaked", free0 - freemem());
  finish("%d flat forks", n, 0);
}

static void
sbrkbomb(void)
{
  int up[2], down[2], pid, mib;
  long free0, low;
  char c;

  name = "sbrkbomb";
  free0 = freemem();
  pipe(up);
  pipe(down);
  for(int i = 0; i < 3; i++){
    if((pid = fork()) == 0){
      close(up[0]);
      close(down[1]);
      for(mib = 0; ; mib++){
        char *p = sbrk(1024 * 1024);
        if(p == (char*)-1)
          break;
        for(int j = 0; j < 1024 * 1024; j += PGSIZE)
          p[j] = 1;
      }
      // then page by page: on several harts, growers that fail a 1 MiB
      // step at once each give back their partial step, which can leave
      // more than 1 MiB free; the last page-sized failure leaves none
      while(sbrk(PGSIZE) != (char*)-1)
        ;
      write(up[1], "x", 1);
      read(down[0], &c, 1);
      exit(0);
    }
  }
  close(up[1]);
  close(down[0]);
  for(int i = 0; i < 3; i++)
    if(read(up[0], &c, 1) != 1)
      failf("a grower died", i);
  low = freemem();
  if(low > 256)
    failf("memory not exhausted", low);
  // with RAM exhausted, calls fail cleanly or work
  int fd = open("/ktestfile", O_CREATE | O_RDWR);
  if(fd >= 0)
    close(fd);
  pid = fork();
  if(pid == 0)
    exit(0);
  if(pid > 0)
    wait(0);
  close(down[1]);
  while(wait(0) >= 0)
    ;
  close(up[0]);
  if(freemem() != free0)
    failf("pages leaked", free0 - freemem());
  finish("free pages %ld at the low point", low, 0);
}

// ---------------------------------------------------------------- exec

static void
badelf(void)
{
  struct elfhdr eh;
  struct proghdr ph;
  char *argv[] = { "x", 0 };
  long free0;
  int fd;

  name = "badelf";
  free0 = freemem();
  // each case: a header, optionally one program header
  for(int c = 0; c < 8; c++){
    memset(&eh, 0, sizeof(eh));
    memset(&ph, 0, sizeof(ph));
    eh.magic = ELF_MAGIC;
    eh.type = 2;
    eh.machine = 243;
    eh.phoff = sizeof(eh);
    eh.phnum = 1;
    eh.phentsize = sizeof(ph);
    ph.type = ELF_PROG_LOAD;
    ph.flags = ELF_PROG_FLAG_R | ELF_PROG_FLAG_X;
    ph.off = 0;
    ph.filesz = sizeof(eh);
    ph.memsz = PGSIZE;
    switch(c){
    case 0: eh.magic = 0x12345678; break;            // not ELF
    case 1: eh.machine = 62; break;                  // x86-64
    case 2: eh.phnum = 60000; break;                 // absurd count
    case 3: ph.memsz = 1UL << 40; break;             // too big
    case 4: ph.vaddr = ~0UL - 100; break;            // wraps
    case 5: ph.filesz = 2 * PGSIZE; break;           // memsz < filesz
    case 6: ph.off = 1UL << 35; break;               // beyond the file
    case 7: ph.vaddr = TRAPFRAME; break;             // into the trapframe
    }
    unlink("/kt_elf");
    fd = open("/kt_elf", O_CREATE | O_WRONLY);
    write(fd, &eh, sizeof(eh));
    write(fd, &ph, sizeof(ph));
    close(fd);
    if(exec("/kt_elf", argv) != -1)
      failf("malformed ELF accepted", c);
  }
  unlink("/kt_elf");
  if(freemem() != free0)
    failf("pages leaked", free0 - freemem());
  finish("8 malformed files refused", 0, 0);
}

// ---------------------------------------------------------------- kill

static void
killtest(void)
{
  int pids[4], fds[2], full[2], st;
  uint64 t0;
  char c;

  name = "kill";
  pipe(fds);
  pipe(full);
  if((pids[0] = fork()) == 0){
    sleep(100000);
    exit(0);
  }
  if((pids[1] = fork()) == 0){
    read(fds[0], &c, 1);                // nobody writes
    exit(0);
  }
  if((pids[2] = fork()) == 0){
    for(;;)
      write(full[1], buf, sizeof(buf)); // nobody reads
  }
  if((pids[3] = fork()) == 0){
    if(fork() == 0){
      sleep(100000);
      exit(0);
    }
    wait(0);                            // waits on a sleeper
    exit(0);
  }
  sleep(5);
  t0 = time_us();
  for(int i = 0; i < 4; i++)
    if(kill(pids[i]) != 0)
      failf("kill failed", pids[i]);
  for(int i = 0; i < 4; i++){
    int pid = wait(&st);
    if(pid < 0 || st != -1)
      failf("killed child status", st);
  }
  if(time_us() - t0 > 2000000)
    failf("kills took more than 2 s (us)", time_us() - t0);
  // the orphaned grandchild of pids[3] belongs to init now; end it too
  static struct procinfo pi[NPROC];
  int n = procinfo(pi, NPROC);
  for(int i = 0; i < n; i++)
    if(pi[i].ppid == 1 && strcmp(pi[i].name, "ktest") == 0)
      kill(pi[i].pid);
  finish("4 blocked processes killed", 0, 0);
}

// ---------------------------------------------------------------- faults

static void
fault(char *kind)
{
  int pid, st;

  name = "fault";
  if((pid = fork()) == 0){
    if(strcmp(kind, "load") == 0)
      st = *(volatile int*)0x80000000UL;
    else if(strcmp(kind, "store") == 0)
      *(volatile int*)TRAPFRAME = 1;
    else if(strcmp(kind, "exec") == 0)
      ((void (*)(void))(PGROUNDUP((uint64)sbrk(0)) + PGSIZE))();
    else if(strcmp(kind, "illegal") == 0)
      asm volatile(".word 0");
    else if(strcmp(kind, "ebreak") == 0)
      asm volatile("ebreak");
    else if(strcmp(kind, "csr") == 0)
      asm volatile("csrw satp, zero");
    exit(0);
  }
  wait(&st);
  printf("ktest fault %s: child status %d\n", kind, st);
  if(st != -1)
    failf("fault did not kill the child", st);
  finish("%s", (long)kind, 0);
}

// ---------------------------------------------------------------- time

static void
timetest(void)
{
  uint64 t0, t1, prev;
  int u0, u1;

  name = "time";
  prev = time_us();
  for(int i = 0; i < 200; i++){
    t1 = time_us();
    if(t1 < prev)
      failf("time_us went backwards", t1 - prev);
    prev = t1;
  }
  t0 = time_us();
  u0 = uptime();
  sleep(10);
  t1 = time_us();
  u1 = uptime();
  if(t1 - t0 < 90000)
    failf("sleep(10) returned too early (us)", t1 - t0);
  if(u1 - u0 < 10)
    failf("uptime advanced too little", u1 - u0);
  if(t1 - t0 > 5000000)
    failf("sleep(10) took more than 5 s (us)", t1 - t0);
  finish("sleep(10) took %ld us, %ld ticks", t1 - t0, u1 - u0);
}

// ---------------------------------------------------------------- preempt

static void
preempt(void)
{
  static struct procinfo pi[NPROC];
  int sleeper, child, n;
  uint64 t0;
  char c;

  name = "preempt";
  if((sleeper = fork()) == 0){
    sleep(3000);
    exit(0);
  }
  printf("ktest preempt: waiting for a line\n");
  if(read(0, &c, 1) != 1)
    failf("no input", 0);
  if((child = fork()) == 0)
    exit(0);
  // spin in user mode: only a timer tick lets the child run
  for(t0 = time_us(); time_us() - t0 < 300000; )
    ;
  n = procinfo(pi, NPROC);
  for(int i = 0; i < n; i++)
    if(pi[i].pid == child && pi[i].state != PS_ZOMBIE)
      failf("the child never ran while we spun 300 ms (state)", pi[i].state);
  kill(sleeper);
  while(wait(0) >= 0)
    ;
  finish("child ran while the parent spun", 0, 0);
}

int
main(int argc, char *argv[])
{
  brk0 = (uint64)sbrk(0);
  if(argc >= 2 && strcmp(argv[1], "args") == 0)
    args();
  if(argc >= 4 && strcmp(argv[1], "fuzz") == 0)
    fuzz(atoi(argv[2]), atoi(argv[3]));
  if(argc >= 2 && strcmp(argv[1], "forkbomb") == 0)
    forkbomb();
  if(argc >= 2 && strcmp(argv[1], "sbrkbomb") == 0)
    sbrkbomb();
  if(argc >= 2 && strcmp(argv[1], "badelf") == 0)
    badelf();
  if(argc >= 2 && strcmp(argv[1], "kill") == 0)
    killtest();
  if(argc >= 3 && strcmp(argv[1], "fault") == 0)
    fault(argv[2]);
  if(argc >= 2 && strcmp(argv[1], "time") == 0)
    timetest();
  if(argc >= 2 && strcmp(argv[1], "preempt") == 0)
    preempt();
  fprintf(2, "usage: ktest args|fuzz SEED N|forkbomb|sbrkbomb|badelf|kill|"
          "fault KIND|time|preempt\n");
  exit(2);
}
