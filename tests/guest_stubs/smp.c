// smp.c: several harts on bare metal (no kernel). bootinfo.cmd picks a test:
//
//   "locks SEED M"   every hart adds 1 to one counter M times under an lr/sc
//                    spinlock, and M times to another with amoadd.w; hart 0
//                    prints both totals (exact: ncpu*M) and exits 0 if right.
//                    SEED shifts each hart's start, so each seed interleaves
//                    the harts differently.
//   "nolock SEED M"  the same increments without the lock: lost updates show
//                    that the harts really interleave inside the loop.
//   "icache R"       hart 0 rewrites a function that harts 1.. have run, R
//                    times; they must run the new code after a fence.i of
//                    their own (even rounds) or one run for them by an IPI
//                    (odd rounds, the handler executes fence.i). Exit 0 if
//                    every hart saw every new version.
//   "icache-nofence R"  the same without any fence.i: prints what the harts
//                    ran (the machine keeps their stale translations).
//   "ipi"            hart 0 wakes each parked-in-wfi hart with an IPI.
//   "fault"          the harts park in wfi, then hart 0 reads a register the
//                    machine does not have (the fault report lists every hart).
#include "stub.h"
#include "bootinfo.h"

#define STACK 4096
#define CODE (KERNBASE + 0x100000)   // a page above the image: "user" code

char hstack[MAXCPU][STACK] __attribute__((aligned(16)));
struct bootinfo *bi;
int mode, seed, count;
volatile int ready[MAXCPU], done[MAXCPU], got[MAXCPU];
volatile int round;            // hart 0's current rewrite
volatile uint lockword;        // 0 or holder's token (hart + 1)
volatile uint64 counter;       // under the lock
volatile uint acounter;        // amoadd
volatile int ipis[MAXCPU];

enum { LOCKS, NOLOCK, ICACHE, ICACHE_NOFENCE, IPI, FAULT };

void hart_entry(void);
asm(".globl hart_entry\n"
    "hart_entry:\n"
    "  la sp, hstack\n"
    "  li t0, 4096\n"
    "  addi t1, a0, 1\n"
    "  mul t0, t0, t1\n"
    "  add sp, sp, t0\n"
    "  call hart_main\n"
    "1: j 1b\n");

static int
trylock(volatile uint *word, uint token)
{
  uint old, fail;

  asm volatile("1: lr.w.aq %0, (%2)\n"
               "   bnez %0, 2f\n"
               "   sc.w %1, %3, (%2)\n"
               "   bnez %1, 1b\n"
               "2:\n"
               : "=&r"(old), "=&r"(fail) : "r"(word), "r"(token) : "memory");
  return old == 0 || old == token;
}

static void
lock(uint token)
{
  while(!trylock(&lockword, token))
    asm volatile(".4byte 0x0100000f");   // pause
}

static void
unlock(void)
{
  __sync_synchronize();
  lockword = 0;
}

static int
parse(const char *s, int *v)
{
  int n = 0, any = 0;

  while(*s == ' ')
    s++;
  while(*s >= '0' && *s <= '9'){
    n = n * 10 + (*s++ - '0');
    any = 1;
  }
  *v = n;
  return any;
}

static const char *
skipword(const char *s)
{
  while(*s && *s != ' ')
    s++;
  return s;
}

static void
increments(int hart)
{
  volatile int d;
  int i;

  for(d = 0; d < (seed * 7919 * (hart + 1)) % 5000; d++)
    ;
  for(i = 0; i < count; i++){
    if(mode == LOCKS)
      lock(hart + 1);
    counter = counter + 1;           // a load, an add, a store: not atomic
    if(mode == LOCKS)
      unlock();
    __sync_fetch_and_add(&acounter, 1);   // amoadd.w
  }
}

// write "li a0, v; ret" at CODE
static void
writecode(int v)
{
  volatile uint32 *p = (uint32 *)CODE;

  p[0] = 0x00000513 | ((uint32)v << 20);   // addi a0, zero, v
  p[1] = 0x00008067;                        // jalr zero, 0(ra)
  __sync_synchronize();
}

static int
callcode(void)
{
  return ((int (*)(void))CODE)();
}

void
trap(struct frame *f)
{
  uint64 scause = csrr(scause);
  int h = f->x[4];   // tp = hartid

  if(scause != ((1UL << 63) | 1)){
    puts("unexpected trap ");
    puthex(scause);
    putc('\n');
    power(POWER_FAIL, 2);
  }
  csrc(sip, SIE_SSIE);
  ipis[h]++;
  if(mode == ICACHE)
    asm volatile("fence.i");
}

void
hart_main(uint64 hartid)
{
  int r, seen = 0;

  asm volatile("mv tp, %0" :: "r"(hartid));
  csrw(stvec, trapvec);
  csrs(sie, SIE_SSIE);
  if(mode == LOCKS || mode == NOLOCK){
    ready[hartid] = 1;
    increments(hartid);
  } else if(mode == IPI || mode == FAULT){
    ready[hartid] = 1;
    while(ipis[hartid] == 0){
      asm volatile("wfi");   // interrupts off in sstatus: wfi still wakes
      csrs(sstatus, SSTATUS_SIE);   // and the IPI is taken here
      csrc(sstatus, SSTATUS_SIE);
    }
  } else {
    got[hartid] = callcode();   // translate the first version here
    ready[hartid] = 1;
    for(r = 2; r <= count; r++){
      while(round < r)
        ;
      if(mode == ICACHE && r % 2 == 0)
        asm volatile("fence.i");
      if(mode == ICACHE && r % 2 == 1)
        while(ipis[hartid] < r / 2){   // hart 0's IPI ran fence.i here
          csrs(sstatus, SSTATUS_SIE);
          csrc(sstatus, SSTATUS_SIE);
        }
      got[hartid] = callcode();
      if(got[hartid] == r)
        seen++;
      done[hartid] = r;
    }
  }
  __sync_synchronize();
  done[hartid] = -1 - seen;
  for(;;)
    asm volatile("wfi");
}

static void
waitall(void)
{
  for(int h = 1; h < bi->ncpu; h++)
    while(done[h] >= 0)
      ;
}

int
main(uint64 hartid, struct bootinfo *b)
{
  const char *s;
  int h, r, n, ok = 1;

  bi = b;
  n = bi->ncpu;
  asm volatile("mv tp, zero");
  csrw(stvec, trapvec);
  s = bi->cmd;
  if(s[0] == 'l')
    mode = LOCKS;
  else if(s[0] == 'n')
    mode = NOLOCK;
  else if(s[0] == 'i' && s[1] == 'p')
    mode = IPI;
  else if(s[0] == 'f')
    mode = FAULT;
  else if(s[0] == 'i')
    mode = s[6] == '-' ? ICACHE_NOFENCE : ICACHE;
  else
    return 3;
  s = skipword(s);
  if(mode == LOCKS || mode == NOLOCK){
    if(!parse(s, &seed))
      return 3;
    s = skipword(s + 1);
    if(!parse(s, &count))
      return 3;
  } else if(mode != IPI && mode != FAULT && !parse(s, &count))
    return 3;

  if(mode == ICACHE || mode == ICACHE_NOFENCE)
    writecode(1);
  for(h = 1; h < n; h++){
    R32(HART_START + 4 * h) = (uint32)(uint64)hart_entry;
    if(R32(HART_STATUS + 4 * h) != 1)
      return 4;
  }
  for(h = 1; h < n; h++)
    while(!ready[h])
      ;

  if(mode == LOCKS || mode == NOLOCK){
    increments(0);
    waitall();
    puts(mode == LOCKS ? "locks" : "nolock");
    puts(" harts ");
    putdec(n);
    puts(" total ");
    putdec(counter);
    puts(" amoadd ");
    putdec(acounter);
    putc('\n');
    return counter == (uint64)n * count && acounter == (uint)n * count ? 0 : 1;
  }
  if(mode == FAULT)
    return R32(PLIC + 0x2000);   // context 0: M-mode, not wired
  if(mode == IPI){
    for(h = 1; h < n; h++)
      R32(SSWI + 4 * h) = 1;
    waitall();
    puts("ipi ok\n");
    return 0;
  }
  for(r = 2; r <= count; r++){
    for(h = 1; h < n; h++)     // everyone ran the previous version
      while(done[h] != r - 1 && r > 2)
        ;
    writecode(r);
    round = r;
    if(mode == ICACHE && r % 2 == 1)
      for(h = 1; h < n; h++)
        R32(SSWI + 4 * h) = 1;   // remote fence.i
  }
  waitall();
  puts("icache");
  for(h = 1; h < n; h++){
    puts(" ");
    putdec(-1 - done[h]);
    if(-1 - done[h] != count - 1)
      ok = 0;
  }
  putc('\n');
  return ok ? 0 : 1;
}
