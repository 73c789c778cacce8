// sysfuzz: a seeded system-call fuzzer. Concurrent processes make random
// system calls -- the AI service's included -- with hostile arguments
// (wild, unaligned, kernel and unmapped pointers, huge and negative
// lengths, garbage fds and request ids, unknown call numbers), while a
// killer process kills them at random moments. The kernel must survive
// it all, and afterwards every page and every AI request slot must be
// free again.
//
//   sysfuzz [-s SEED] [-n CALLS | -t SECONDS] [-p PROCS] [-k PERCENT]
//           [-w SECONDS] [-q]
//
//   -s SEED     random seed (default 1). Each fuzz process draws its calls
//               from a stream of its own (seed, slot, generation), so a
//               seed always makes the same calls in each process; how the
//               processes interleave and when kills land depend on timing.
//   -n CALLS    stop after about this many calls in all (default 2000)
//   -t SECONDS  or after this long
//   -p PROCS    fuzz processes at once (default 4, at most 16)
//   -k PERCENT  chance that the killer kills one of them at each of its
//               wake-ups, every 10-40 ms (default 20; 0 = never)
//   -w SECONDS  watchdog: a fuzz process alive this long is killed (it is
//               blocked somewhere legitimate, e.g. as a registered AI
//               worker waiting for requests); default 10
//   -q          no per-call table
//
// Each fuzz process makes up to QUOTA calls and exits; the parent starts
// a new one in its slot until the calls or the time are used up. Counts
// go to /fzstat/SLOT (cumulative, rewritten every FLUSH calls and before
// an exit or exec), so a killed process loses at most FLUSH calls of
// accounting. The report: calls, successes and failures per system call,
// the AI errors seen (ai_lasterr), processes killed, and the checks:
// free pages back to their starting value, every AI slot free, no fuzz
// process left. The last line is "sysfuzz: OK ..." (exit 0) or
// "sysfuzz: FAIL ..." (exit 1).

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "param.h"
#include "syscall.h"
#include "procinfo.h"
#include "riscv.h"
#include "vmlayout.h"
#include "user.h"

#define NSYS      64            // call numbers counted one by one; then "other"
#define NAIERR    17            // AI_OK .. AI_EOVERLOAD
#define QUOTA     200           // calls per fuzz process
#define FLUSH     32            // calls between stats writes
#define MAXPROCS  16
#define TEXTMAX   45056         // kernel_c/ai_slots.h AIS_TEXTMAX
#define MAGIC     0x7a667573    // "sufz"

// per process slot, in /fzstat/SLOT
struct fzstats {
  uint32 magic;
  int gen;                      // generation that wrote it
  uint32 calls[NSYS + 1];
  uint32 ok[NSYS + 1];
  uint32 aierr[NAIERR + 1];     // ai_lasterr() after failed AI calls; [NAIERR] = other
  uint32 skipped;               // halt: never made
  uint32 fuzzexit, execs, selfkill;
  uint32 sum;                   // checksum of the words before it
};

static char *callname[NSYS] = {
  [SYS_fork] "fork", [SYS_exit] "exit", [SYS_wait] "wait", [SYS_pipe] "pipe",
  [SYS_read] "read", [SYS_kill] "kill", [SYS_exec] "exec", [SYS_fstat] "fstat",
  [SYS_chdir] "chdir", [SYS_dup] "dup", [SYS_getpid] "getpid", [SYS_sbrk] "sbrk",
  [SYS_sleep] "sleep", [SYS_uptime] "uptime", [SYS_open] "open", [SYS_write] "write",
  [SYS_mknod] "mknod", [SYS_unlink] "unlink", [SYS_link] "link", [SYS_mkdir] "mkdir",
  [SYS_close] "close", [SYS_time_us] "time_us", [SYS_halt] "halt",
  [SYS_procinfo] "procinfo", [SYS_freemem] "freemem", [SYS_ignintr] "ignintr",
  [SYS_ai_submitx] "ai_submitx", [SYS_ai_wait] "ai_wait", [SYS_ai_query] "ai_query",
  [SYS_ai_call] "ai_call", [SYS_ai_worker_register] "ai_worker_register",
  [SYS_ai_worker_get] "ai_worker_get", [SYS_ai_worker_run] "ai_worker_run",
  [SYS_ai_worker_complete] "ai_worker_complete", [SYS_ai_info] "ai_info",
  [SYS_ai_stats] "ai_stats", [SYS_ai_lasterr] "ai_lasterr", [SYS_ai_read] "ai_read",
};

static char *aierrname[NAIERR + 1] = {
  "OK", "EINVAL", "ERANGE", "ETOOLONG", "ENODEV", "EBUSY", "EPERM", "ESMALL",
  "EWORKER", "EDEVICE", "EKILLED", "ECANCELED", "ETIMEDOUT", "ENET", "ESLOW", "EPROTO",
  "EOVERLOAD", "other",
};

// ------------------------------------------------------------ options

static int seed = 1, ncalls = 2000, seconds = 0, nprocs = 4, killpct = 20;
static int watchdog = 10, quiet = 0;
static int parent;              // the parent's pid
static struct ai_info info;     // the AI device, if any (info.present)

// ------------------------------------------------------------ randomness

static uint64 rng;

static uint64
rnd(void)
{
  // xorshift64*
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717UL;
}

static void
reseed(uint64 a, uint64 b, uint64 c)
{
  rng = 0x9E3779B97F4A7C15UL ^ (a * 0xBF58476D1CE4E5B9UL) ^ (b << 32) ^ (c * 0x94D049BB133111EBUL);
  if(rng == 0)
    rng = 1;
  rnd();
  rnd();
}

static int
pick(int n)
{
  return rnd() % n;
}

// ------------------------------------------------------------ a fuzz process

static struct fzstats st;
static int slot, gen;
static uint64 brk0;             // the break at start (user text/data end below it)
static char *arena;             // the process's heap pages: the "valid" buffers
#define ARENA (12 * PGSIZE)     // room for the largest AI result text (TEXTMAX)
static int ids[8], nids;        // AI requests this process submitted
static int workid;              // a request taken as a registered worker
static int isworker;
static int lastchild;           // pid of the last fork
static struct ai_submit_args sargs;   // in .bss: always mapped, whatever sbrk did
static uint32 stoks[AI_MAX_TOKENS + 8];
static char *argvbuf[4];

static char *fsnames[] = {
  "a", "b", "d", "d/e", "d/e/f", "..", ".", "", "a.b", "/fz", "/fz/a",
  "abcdefghijklmnopqrstuvwxyz", "d/", "//a//", "nosuch/x",
};
static char *execnames[] = { "/echo", "/nosuch", "", "a", "/fz", "d" };

static void
flushstats(void)
{
  char path[32];
  int fd;
  uint32 *w = (uint32 *)&st, sum = 0;

  st.magic = MAGIC;
  st.gen = gen;
  for(int i = 0; i < (int)(((char *)&st.sum - (char *)&st) / 4); i++)
    sum = sum * 31 + w[i];
  st.sum = sum;
  snprintf(path, sizeof(path), "/fzstat/%d", slot);
  if((fd = open(path, O_WRONLY)) >= 0){
    write(fd, &st, sizeof(st));
    close(fd);
  }
}

// Addresses no call may accept (kernel, unmapped, guard, beyond the
// break, non-canonical) and some that only look bad.
static uint64
badptr(void)
{
  uint64 guard = brk0 - (USERSTACK + 1) * PGSIZE;
  uint64 v[] = {
    0, 1, 7, 0x80000000UL, 0x80001000UL, 0x10000000UL, 0x0c000000UL,
    TRAPFRAME, TRAMPOLINE, TRAMPOLINE + 8, MAXVA - 1, MAXVA, MAXVA + PGSIZE,
    1UL << 63, ~0UL, ~0UL - 7, 0xffffffffffff0000UL, guard, guard + PGSIZE - 4,
    PGROUNDUP(brk0) + 64 * PGSIZE, (uint64)badptr, (uint64)badptr + 1,
  };
  return v[pick(sizeof(v) / sizeof(v[0]))];
}

// A pointer that is usually fine for n bytes: in the arena (straddling its
// end now and then), unaligned, in .bss, or bad.
static uint64
ptr(void)
{
  switch(pick(8)){
  case 0: case 1: case 2:
    return (uint64)arena + pick(ARENA / 8) * 8;
  case 3:
    return (uint64)arena + pick(ARENA);           // unaligned
  case 4:
    return (uint64)arena + ARENA - pick(64);      // at the end of the heap
  case 5:
    return (uint64)stoks + pick(8) * 4;
  default:
    return badptr();
  }
}

static long
len(void)
{
  static long v[] = {
    0, 1, 2, 3, 4, 7, 8, 15, 16, 63, 64, 255, 256, 511, 4095, 4096, 4097,
    8192, 16384, 65536, 0x7fffffff, -1, -2, -4096, -0x80000000L,
    AI_MAX_TOKENS, AI_MAX_TOKENS + 1, AI_MAX_PREDICT, AI_MAX_PREDICT + 1,
    TEXTMAX - 1, TEXTMAX, TEXTMAX + 1, 1L << 32, (1L << 32) + 1,
  };
  if(pick(4) == 0)
    return (long)rnd() >> pick(64);
  return v[pick(sizeof(v) / sizeof(v[0]))];
}

static long
fd(void)
{
  static long v[] = { -1, 0, 1, 2, 3, 4, 5, 6, 15, NOFILE, NOFILE + 1, 1000,
                      0x7fffffff, -0x80000000L, 1L << 32 };
  if(pick(3))
    return pick(8);
  return v[pick(sizeof(v) / sizeof(v[0]))];
}

static long
reqid(void)
{
  if(workid && pick(3) == 0)
    return workid;
  if(nids && pick(3))
    return ids[pick(nids)];
  switch(pick(5)){
  case 0: return 0;
  case 1: return -1;
  case 2: return 1 + pick(200);
  case 3: return 0x7fffffff;
  default: return (long)rnd();
  }
}

static uint64
name(void)
{
  if(pick(8) == 0)
    return badptr();
  return (uint64)fsnames[pick(sizeof(fsnames) / sizeof(fsnames[0]))];
}

static void
forget(int id)
{
  for(int i = 0; i < nids; i++)
    if(ids[i] == id){
      ids[i] = ids[--nids];
      return;
    }
}

// A struct ai_submit_args, mostly good (so real requests get queued,
// computed, waited for and orphaned), sometimes hostile.
static uint64
submitargs(int mayblock)
{
  uint32 vocab = info.vocab_size ? info.vocab_size : 100;

  memset(&sargs, 0, sizeof(sargs));
  for(int i = 0; i < 8; i++)
    stoks[i] = rnd() % vocab;
  sargs.tokens = (uint64)stoks;
  sargs.ntokens = 1 + pick(8);
  sargs.npredict = pick(8) ? 1 + pick(16) : 1 + pick(200);
  sargs.flags = mayblock && pick(2) ? 0 : AI_NONBLOCK;
  if(pick(8) == 0)
    sargs.flags |= AI_STOP_EOS;
  if(pick(6) == 0){
    // hostile
    switch(pick(9)){
    case 0: sargs.tokens = pick(2) ? badptr() : (uint64)stoks + 1 + pick(3); break;
    case 1: sargs.ntokens = len(); break;
    case 2: sargs.npredict = len(); break;
    case 3: sargs.flags = rnd() | AI_NONBLOCK; break;
    case 4: sargs.speculate = AI_MAX_SPECULATE + 1 + pick(100); break;
    case 5: stoks[pick(8)] = vocab + pick(3); break;
    case 6: stoks[pick(8)] = ~0U; break;
    case 7: sargs.temp_milli = rnd(); sargs.top_k = rnd(); sargs.top_p_milli = rnd(); break;
    default: sargs.ntokens = AI_MAX_TOKENS; sargs.npredict = info.max_context; break;
    }
    sargs.flags |= AI_NONBLOCK;
  }
  if(pick(20) == 0)
    return pick(2) ? badptr() : (uint64)&sargs + 4;   // the struct itself
  return (uint64)&sargs;
}

static long
sys(long num, long a0, long a1, long a2, long a3, long a4, long a5)
{
  register long r7 asm("a7") = num;
  register long r0 asm("a0") = a0;
  register long r1 asm("a1") = a1;
  register long r2 asm("a2") = a2;
  register long r3 asm("a3") = a3;
  register long r4 asm("a4") = a4;
  register long r5 asm("a5") = a5;

  asm volatile("ecall" : "+r"(r0) : "r"(r7), "r"(r1), "r"(r2), "r"(r3), "r"(r4), "r"(r5)
               : "memory");
  return r0;
}

// The known calls, AI calls twice as often as the others.
static int known[] = {
  SYS_fork, SYS_exit, SYS_wait, SYS_pipe, SYS_read, SYS_kill, SYS_exec,
  SYS_fstat, SYS_chdir, SYS_dup, SYS_getpid, SYS_sbrk, SYS_sleep,
  SYS_uptime, SYS_open, SYS_write, SYS_mknod, SYS_unlink, SYS_link,
  SYS_mkdir, SYS_close, SYS_time_us, SYS_halt, SYS_procinfo, SYS_freemem,
  SYS_ignintr,
  SYS_ai_submitx, SYS_ai_wait, SYS_ai_query, SYS_ai_call, SYS_ai_worker_register,
  SYS_ai_worker_get, SYS_ai_worker_run, SYS_ai_worker_complete, SYS_ai_info,
  SYS_ai_stats, SYS_ai_lasterr, SYS_ai_read,
  SYS_ai_submitx, SYS_ai_wait, SYS_ai_query, SYS_ai_call, SYS_ai_submitx,
  SYS_ai_wait, SYS_ai_worker_get, SYS_ai_worker_complete, SYS_ai_stats,
};

static long
callnum(void)
{
  static long wild[] = { 0, 27, 28, 29, 42, 43, 50, 63, 64, 100, 1000, -1, -22,
                         1L << 31, 1L << 40, 0x7fffffff };
  if(pick(12) == 0)
    return pick(2) ? wild[pick(sizeof(wild) / sizeof(wild[0]))] : (long)rnd();
  return known[pick(sizeof(known) / sizeof(known[0]))];
}

// Count call num's outcome r.
static void
account(long num, long r)
{
  int idx = num >= 0 && num < NSYS ? num : NSYS;

  st.calls[idx]++;
  if(r != -1)
    st.ok[idx]++;
  if(num >= SYS_ai_submitx && num <= SYS_ai_stats && r == -1){
    int e = ai_lasterr();
    st.aierr[e >= 0 && e < NAIERR ? e : NAIERR]++;
  }
}

// A call made by a scenario: made and counted like the others.
static long
scall(long num, long a0, long a1, long a2, long a3)
{
  long r = sys(num, a0, a1, a2, a3, 0, 0);

  account(num, r);
  return r;
}

// Sequences that single random calls rarely line up: a process that is
// its own worker (register, take a request, complete it with text lengths
// at the limits, wait for it), and a client killed while it waits.
// Returns the calls made.
static int
scenario(void)
{
  struct ai_stats as;
  struct ai_work *w = (struct ai_work *)(arena + ARENA - PGSIZE);
  long id, r, pid, n = 0;
  static long lens[] = { TEXTMAX - 1, TEXTMAX, TEXTMAX + 1, 0, 1, 17 };

  if(pick(2)){
    n += 2;
    scall(SYS_ai_worker_register, 0, 0, 0, 0);
    id = scall(SYS_ai_submitx, submitargs(0), 0, 0, 0);
    if(id > 0 && nids < 8)
      ids[nids++] = id;
    // take a request only if one waits: an empty queue would block
    n++;
    if(scall(SYS_ai_stats, (long)&as, 0, 0, 0) < 0 || as.queued == 0)
      return n;
    n++;
    if(scall(SYS_ai_worker_get, 0, 0, (long)w, 0) < 0)
      return n;
    workid = w->reqid;
    n++;
    if(pick(3) == 0)
      r = scall(SYS_ai_worker_run, workid, 0, 0, 0);
    else
      r = scall(SYS_ai_worker_complete, workid, (long)arena, lens[pick(6)], pick(3) ? 0 : AI_EDEVICE);
    if(r == 0)
      workid = 0;
    if(id > 0){
      n++;
      r = scall(SYS_ai_wait, id, (long)arena, ARENA - PGSIZE, 0);
      if(r >= 0 || ai_lasterr() != AI_ESMALL)
        forget(id);
    }
    return n;
  }
  // a client killed in ai_wait (or before it got there)
  n++;
  if((pid = scall(SYS_fork, 0, 0, 0, 0)) == 0){
    id = ai_submitx((struct ai_submit_args *)submitargs(0));
    if(id > 0)
      ai_wait(id, arena, ARENA);
    exit(0);
  }
  if(pid > 0){
    n += 3;
    scall(SYS_sleep, pick(3), 0, 0, 0);
    scall(SYS_kill, pid, 0, 0, 0);
    scall(SYS_wait, 0, 0, 0, 0);
  }
  return n;
}

// One call: its number and arguments, made, counted.
static void
onecall(void)
{
  long num = callnum(), a[6], r;
  int raw = pick(10) == 0;


  for(int i = 0; i < 6; i++)
    a[i] = pick(3) ? (long)ptr() : len();
  if(!raw){
    switch(num){
    case SYS_exit: a[0] = len(); break;
    case SYS_wait: a[0] = pick(3) ? 0 : ptr(); break;
    case SYS_pipe: a[0] = ptr(); break;
    case SYS_read: case SYS_write: a[0] = fd(); a[1] = ptr(); a[2] = len(); break;
    case SYS_fstat: a[0] = fd(); a[1] = ptr(); break;
    case SYS_dup: case SYS_close: a[0] = fd(); break;
    case SYS_kill: {
      long v[] = { -1, 0, 1, 999999, 0x7fffffff, lastchild, getpid() };
      a[0] = v[pick(sizeof(v) / sizeof(v[0]))];
      break;
    }
    case SYS_exec:
      a[0] = pick(6) ? (uint64)execnames[pick(sizeof(execnames) / sizeof(execnames[0]))]
                     : badptr();
      argvbuf[0] = "echo";
      argvbuf[1] = pick(3) ? "fuzz" : (char *)badptr();
      argvbuf[2] = 0;
      a[1] = pick(4) ? (uint64)argvbuf : ptr();
      break;
    case SYS_chdir: case SYS_unlink: case SYS_mkdir: a[0] = name(); break;
    case SYS_link: a[0] = name(); a[1] = name(); break;
    case SYS_open:
      a[0] = name();
      a[1] = (long[]){ O_RDONLY, O_WRONLY, O_RDWR, O_CREATE | O_RDWR,
                       O_CREATE | O_TRUNC | O_WRONLY, 3, 0x1000, -1 }[pick(8)];
      break;
    case SYS_mknod: a[0] = name(); a[1] = (long[]){ -1, 0, 2, 5, NDEV, 1000 }[pick(6)]; break;
    case SYS_sbrk:
      a[0] = (long[]){ 0, 1, 4096, 3 * 4096, -4096, -8192, -1, 0x7fffffff,
                       -0x7fffffff, 1 << 24, 4 * 1024 * 1024 }[pick(11)];
      break;
    case SYS_sleep: a[0] = (long[]){ -1, 0, 1, 2, 3, -0x80000000L }[pick(6)]; break;
    case SYS_procinfo: a[0] = ptr(); a[1] = (long[]){ 0, 1, 2, NPROC, NPROC + 1, -1, 0x7fffffff }[pick(7)]; break;
    case SYS_ignintr: a[0] = (long[]){ -1, 0, 1, 2, 0x7fffffff }[pick(5)]; break;
    case SYS_ai_submitx: a[0] = submitargs(nids == 0 && !isworker); break;
    case SYS_ai_wait:
      a[0] = reqid();
      a[1] = ptr();
      a[2] = pick(3) ? ARENA - (a[1] - (long)arena) : len();
      if(pick(4) == 0)
        a[2] = 1 + pick(8);
      break;
    case SYS_ai_query: a[0] = reqid(); a[1] = ptr(); break;
    case SYS_ai_read:
      // never without a timeout: this process may be the worker of its own request
      a[0] = reqid();
      a[1] = ptr();
      a[2] = pick(2) ? pick(4) : len();
      a[3] = pick(2) ? 1 + pick(64) : len();
      a[4] = (long[]){ 0, 1, 10, 50 }[pick(4)];
      break;
    case SYS_ai_call:
      submitargs(0);
      a[0] = pick(5) ? (uint64)stoks : ptr();
      a[1] = pick(4) ? sargs.ntokens : len();
      a[2] = pick(4) ? sargs.npredict : len();
      a[3] = ptr();
      a[4] = pick(2) ? 256 : len();
      break;
    case SYS_ai_worker_register:
      if(pick(4))
        num = SYS_ai_lasterr;  // rarely: a registered worker may block in get
      break;
    case SYS_ai_worker_get:
      a[0] = pick(3) ? (long)ptr() : 0;
      a[1] = pick(3) ? AI_MAX_TOKENS : len();
      if(a[0] == 0 && pick(2))
        a[1] = 0;
      a[2] = ptr();
      break;
    case SYS_ai_worker_run: a[0] = reqid(); break;
    case SYS_ai_worker_complete:
      // mostly the request this worker holds, with a whole buffer, so the
      // lengths (text limits among them) reach the kernel's text handling
      a[0] = workid && pick(3) ? workid : reqid();
      a[1] = pick(2) ? (long)arena : ptr();
      a[2] = pick(2) ? len() : 1 + pick(32);
      a[3] = (long[]){ 0, 0, 0, 1, AI_EDEVICE, AI_ECANCELED, 99, -1 }[pick(8)];
      break;
    case SYS_ai_info: case SYS_ai_stats: a[0] = ptr(); break;
    }
  }
  // what even a raw call must not do: end the run, block for good, or
  // kill a process that is not ours
  if(num == SYS_halt){
    st.skipped++;
    return;
  }
  if(num == SYS_exit && pick(4))
    num = SYS_getpid;           // exit, but not so often that quotas end early
  if(num == SYS_mknod && (short)a[1] == 1)
    a[1] = 2;                   // never a console device (a read would block)
  if(num == SYS_sleep && (a[0] > 3 || a[0] < -3))
    a[0] = 1;
  if(num == SYS_ai_submitx && raw)
    num = SYS_ai_stats;         // a raw struct pointer could name a blocking request
  if(num == SYS_ai_call && (nids || isworker))
    num = SYS_ai_query;         // ai_call blocks for a slot: never while holding one
  if(num == SYS_kill && a[0] > 1 && a[0] < 999999 && a[0] != lastchild)
    a[0] = getpid();
  // calls after which this process may be gone: account for them first
  if(num == SYS_exit || num == SYS_exec || (num == SYS_kill && a[0] == getpid())){
    if(num == SYS_exit)
      st.fuzzexit++;
    else if(num == SYS_exec)
      st.execs++;
    else
      st.selfkill++;
    st.calls[num]++;
    flushstats();
  }

  r = sys(num, a[0], a[1], a[2], a[3], a[4], a[5]);
  if(num != SYS_exec && !(num == SYS_kill && a[0] == getpid()))
    account(num, r);             // (exit never returns here)

  // what a success leaves behind
  switch(num){
  case SYS_fork:
    if(r == 0)
      exit(0);                  // the new process does nothing more
    if(r > 0)
      lastchild = r;
    break;
  case SYS_pipe:
    if(r == 0){
      // keep at most one end: holding both, a read or write could block forever
      int *p = (int *)a[0];
      int keep = pick(3);
      if(keep != 0)
        close(p[0]);
      if(keep != 1)
        close(p[1]);
    }
    break;
  case SYS_ai_submitx:
    if(r > 0 && nids < 8)
      ids[nids++] = r;
    break;
  case SYS_ai_wait:
    if(r >= 0 || ai_lasterr() != AI_ESMALL)
      forget(a[0]);
    break;
  case SYS_ai_worker_register:
    if(r == 0)
      isworker = 1;
    break;
  case SYS_ai_worker_get:
    if(r >= 0 && a[2] != 0)
      workid = ((struct ai_work *)a[2])->reqid;
    break;
  case SYS_ai_worker_run: case SYS_ai_worker_complete:
    if(r == 0 && a[0] == workid)
      workid = 0;
    break;
  }
}

static void
fuzzproc(void)
{
  reseed(seed, slot, gen);
  close(0);
  close(1);
  close(2);
  memset(&st, 0, sizeof(st));
  brk0 = (uint64)sbrk(0);
  arena = sbrk(ARENA);
  if(arena == (char *)-1)
    exit(3);
  memset(arena, 'x', ARENA);
  chdir("/fz");
  for(int i = 0, flushed = 0; i < QUOTA; i++){
    if(pick(16) == 0)
      i += scenario() - 1;
    else
      onecall();
    if(i - flushed >= FLUSH){
      flushstats();
      flushed = i;
    }
  }
  flushstats();
  exit(0);
}

// ------------------------------------------------------------ the killer

// Kills one of the parent's fuzz processes now and then (-k), and any that
// has been alive longer than the watchdog (-w); on /fzstat/stop, kills them
// all and reports its counts through /fzstat/killer.
static void
killer(void)
{
  static struct procinfo pt[NPROC];
  static struct { int pid; uint64 born; } seen[NPROC];
  int n, nseen = 0, kills = 0, dogs = 0, fd, victims[NPROC], nv;
  uint64 now;
  struct stat sb;

  reseed(seed, 999, 0);
  for(;;){
    int stop = stat("/fzstat/stop", &sb) == 0;
    now = time_us();
    n = procinfo(pt, NPROC);
    nv = 0;
    for(int i = 0; i < n; i++){
      if(pt[i].ppid != parent || pt[i].pid == getpid() || pt[i].state == PS_ZOMBIE)
        continue;
      victims[nv++] = pt[i].pid;
      int k;
      for(k = 0; k < nseen && seen[k].pid != pt[i].pid; k++)
        ;
      if(k == nseen && nseen < NPROC){
        seen[nseen].pid = pt[i].pid;
        seen[nseen++].born = now;
      } else if(k < nseen && now - seen[k].born > watchdog * 1000000UL && !pt[i].killed){
        kill(pt[i].pid);
        dogs++;
      }
    }
    // forget the dead
    for(int k = 0; k < nseen; k++){
      int alive = 0;
      for(int i = 0; i < nv; i++)
        alive |= victims[i] == seen[k].pid;
      if(!alive)
        seen[k--] = seen[--nseen];
    }
    if(stop){
      for(int i = 0; i < nv; i++)
        kill(victims[i]);
      if((fd = open("/fzstat/killer", O_CREATE | O_WRONLY | O_TRUNC)) >= 0){
        fprintf(fd, "%d %d\n", kills, dogs);
        close(fd);
      }
      exit(0);
    }
    if(nv > 0 && pick(100) < killpct){
      kill(victims[pick(nv)]);
      kills++;
    }
    sleep(1 + pick(4));
  }
}

// ------------------------------------------------------------ the parent

static struct fzstats total;
static int lost;                // records missing or torn

static void
collect(int s)
{
  char path[32];
  struct fzstats r;
  uint32 *w = (uint32 *)&r, sum = 0;
  int fd, n;

  snprintf(path, sizeof(path), "/fzstat/%d", s);
  if((fd = open(path, O_RDONLY)) < 0){
    lost++;
    return;
  }
  n = read(fd, &r, sizeof(r));
  close(fd);
  for(int i = 0; i < (int)(((char *)&r.sum - (char *)&r) / 4); i++)
    sum = sum * 31 + w[i];
  if(n != sizeof(r) || r.magic != MAGIC || r.sum != sum){
    lost++;
    return;
  }
  if(r.gen < 0)
    return;                     // never written by a fuzz process
  for(int i = 0; i <= NSYS; i++){
    total.calls[i] += r.calls[i];
    total.ok[i] += r.ok[i];
  }
  for(int i = 0; i <= NAIERR; i++)
    total.aierr[i] += r.aierr[i];
  total.skipped += r.skipped;
  total.fuzzexit += r.fuzzexit;
  total.execs += r.execs;
  total.selfkill += r.selfkill;
}

// (re)write slot s's record as "nothing yet" so a process killed before
// its first flush is not counted twice
static void
blank(int s)
{
  char path[32];
  int fd;

  memset(&st, 0, sizeof(st));
  gen = -1;
  slot = s;
  snprintf(path, sizeof(path), "/fzstat/%d", s);
  if((fd = open(path, O_CREATE | O_WRONLY)) >= 0)
    close(fd);
  flushstats();
}

static uint32
sumof(uint32 *v, int n)
{
  uint32 t = 0;

  for(int i = 0; i < n; i++)
    t += v[i];
  return t;
}

// Kills every sysfuzz process that init inherited (the fuzz processes are
// gone: these are their orphaned children; another run's own processes have
// a living parent). Returns how many it killed.
static int
killstrays(void)
{
  static struct procinfo pt[NPROC];
  int n = procinfo(pt, NPROC), k = 0;

  for(int i = 0; i < n; i++)
    if(pt[i].ppid == 1 && pt[i].state != PS_ZOMBIE && !pt[i].killed &&
       strcmp(pt[i].name, "sysfuzz") == 0 && kill(pt[i].pid) == 0)
      k++;
  return k;
}

static int
idle_ai(struct ai_stats *a)
{
  return a->slots[AI_FREE] == AI_NSLOT && a->queued == 0 && a->orphans == 0;
}

static void
usage(void)
{
  fprintf(2, "usage: sysfuzz [-s SEED] [-n CALLS | -t SECONDS] [-p PROCS] [-k PERCENT] "
          "[-w SECONDS] [-q]\n");
  exit(2);
}

int
main(int argc, char *argv[])
{
  int pids[MAXPROCS], gens[MAXPROCS], pid, status, spawned = 0, live = 0, killerpid, fd;
  int nkilled = 0, nexited = 0, kills = 0, dogs = 0, stopping = 0, bad = 0;
  long free0, free1;
  uint64 t0, t1, budget;
  struct ai_stats a0, a1;
  char line[64];

  for(int i = 1; i < argc; i++){
    if(i + 1 >= argc && strcmp(argv[i], "-q") != 0)
      usage();
    if(strcmp(argv[i], "-s") == 0) seed = atoi(argv[++i]);
    else if(strcmp(argv[i], "-n") == 0) ncalls = atoi(argv[++i]);
    else if(strcmp(argv[i], "-t") == 0) seconds = atoi(argv[++i]);
    else if(strcmp(argv[i], "-p") == 0) nprocs = atoi(argv[++i]);
    else if(strcmp(argv[i], "-k") == 0) killpct = atoi(argv[++i]);
    else if(strcmp(argv[i], "-w") == 0) watchdog = atoi(argv[++i]);
    else if(strcmp(argv[i], "-q") == 0) quiet = 1;
    else usage();
  }
  if(nprocs < 1 || nprocs > MAXPROCS || ncalls < 1 || seconds < 0 || watchdog < 1)
    usage();
  parent = getpid();
  if(ai_info(&info) < 0)
    memset(&info, 0, sizeof(info));
  mkdir("/fz");
  mkdir("/fz/d");
  mkdir("/fzstat");
  unlink("/fzstat/stop");
  unlink("/fzstat/killer");
  for(int s = 0; s < nprocs; s++)
    blank(s);
  printf("sysfuzz: seed %d, %d processes, %s %d, kill %d%%, watchdog %d s, AI device %s\n",
         seed, nprocs, seconds ? "seconds" : "calls", seconds ? seconds : ncalls, killpct,
         watchdog, info.present ? (info.state == 2 ? "ready" : "not ready") : "absent");

  ai_stats(&a0);
  free0 = freemem();
  t0 = time_us();
  budget = seconds ? 0 : ncalls;
  if((killerpid = fork()) == 0)
    killer();
  for(int s = 0; s < nprocs; s++){
    gens[s] = 0;
    pids[s] = -1;
  }

  // keep nprocs fuzz processes going until the calls or the time are used
  for(;;){
    for(int s = 0; s < nprocs && !stopping; s++){
      if(pids[s] > 0)
        continue;
      // (calls counted so far, plus a full quota for each process running)
      if(seconds ? time_us() - t0 >= seconds * 1000000UL
                 : sumof(total.calls, NSYS + 1) + (uint64)live * QUOTA >= budget){
        stopping = 1;
        break;
      }
      slot = s;
      gen = gens[s]++;
      if((pid = fork()) == 0)
        fuzzproc();
      if(pid < 0){
        printf("sysfuzz: fork failed\n");
        bad = 1;
        stopping = 1;
        break;
      }
      pids[s] = pid;
      spawned++;
      live++;
    }
    if(stopping && (fd = open("/fzstat/stop", O_CREATE | O_WRONLY)) >= 0){
      close(fd);
      stopping = 2;
    }
    if((pid = wait(&status)) < 0)
      break;
    if(pid == killerpid){
      killerpid = -1;
      continue;
    }
    for(int s = 0; s < nprocs; s++){
      if(pids[s] != pid)
        continue;
      pids[s] = -1;
      live--;
      if(status == -1)
        nkilled++;
      else
        nexited++;
      collect(s);
      blank(s);
    }
  }
  t1 = time_us();
  if((fd = open("/fzstat/killer", O_RDONLY)) >= 0){
    int n = read(fd, line, sizeof(line) - 1);
    line[n > 0 ? n : 0] = 0;
    close(fd);
    kills = atoi(line);
    char *sp = strchr(line, ' ');
    dogs = sp ? atoi(sp + 1) : 0;
  }

  // settle: orphaned requests finish on the device, exited grandchildren
  // are reaped by init. A grandchild whose parent was killed mid-scenario
  // (a client in ai_wait) now belongs to init and may wait for good: with no
  // daemon, no worker is left to run its request. After half a second such
  // stragglers are killed, and what they held must come back like the rest.
  int stray = 0;
  for(int i = 0; i < 1000; i++){
    ai_stats(&a1);
    if(freemem() == free0 && idle_ai(&a1))
      break;
    if(i >= 50)
      stray += killstrays();
    sleep(1);
  }
  if(stray && !quiet)
    printf("sysfuzz: %d stray processes killed after the run\n", stray);
  free1 = freemem();
  ai_stats(&a1);

  uint32 calls = sumof(total.calls, NSYS + 1), oks = sumof(total.ok, NSYS + 1);
  if(!quiet){
    printf("  %-20s %7s %7s %7s\n", "call", "made", "ok", "failed");
    for(int i = 0; i <= NSYS; i++){
      if(total.calls[i] == 0)
        continue;
      char num[16];
      snprintf(num, sizeof(num), "#%d", i);
      printf("  %-20s %7d %7d %7d\n", i == NSYS ? "(number >= 64)" : callname[i] ? callname[i] : num,
             total.calls[i], total.ok[i], total.calls[i] - total.ok[i]);
    }
    printf("  AI errors:");
    for(int i = 0; i <= NAIERR; i++)
      if(total.aierr[i])
        printf(" %s=%d", aierrname[i], total.aierr[i]);
    printf("\n");
  }
  printf("sysfuzz: %d calls (%d ok, %d failed) in %d ms by %d processes; %d killed "
         "(%d by the killer, %d by the watchdog), %d exited (%d by a fuzzed exit), "
         "%d exec attempts, %d halts skipped, %d records lost\n",
         calls, oks, calls - oks, (int)((t1 - t0) / 1000), spawned, nkilled, kills, dogs,
         nexited, total.fuzzexit, total.execs, total.skipped, lost);
  printf("sysfuzz: AI requests %d submitted, %d completed, %d failed; slots free %d/%d, "
         "queued %d, orphans %d; free pages %ld -> %ld\n",
         (int)(a1.submitted - a0.submitted), (int)(a1.completed - a0.completed),
         (int)(a1.failed - a0.failed), a1.slots[AI_FREE], AI_NSLOT, a1.queued, a1.orphans,
         free0, free1);
  if(free1 != free0){
    printf("sysfuzz: FAIL %ld pages leaked\n", free0 - free1);
    bad = 1;
  }
  if(!idle_ai(&a1)){
    printf("sysfuzz: FAIL AI slots not free after the run\n");
    bad = 1;
  }
  if(live != 0){
    printf("sysfuzz: FAIL %d fuzz processes not reaped\n", live);
    bad = 1;
  }
  printf("sysfuzz: %s seed=%d calls=%d ok=%d killed=%d leaked=%ld\n", bad ? "FAIL" : "OK",
         seed, calls, oks, nkilled, free0 - free1);
  exit(bad);
}
