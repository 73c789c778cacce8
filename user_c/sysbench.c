// sysbench: micro-benchmarks of the machine, run by `harness bench`.
//
//   sysbench getpid [N]  N getpid() calls: microseconds per system-call
//                        round trip (trap in, dispatch, trap out)
//   sysbench cpu [N]     N iterations of an integer loop of exactly
//                        LOOP_INSNS instructions (hand-written assembly,
//                        so the count does not depend on the compiler):
//                        guest MIPS of CPU-bound user code, timer
//                        interrupts included
//   sysbench fork [N]    N fork + exit + wait: microseconds per process
//   sysbench pipe [N]    N KiB through a pipe to a child: KiB per second
//   sysbench fs [N]      N times: create a file, write 4 KiB, close,
//                        delete it: file operations per second (each is
//                        one or two log commits; `harness bench fs`)
//   sysbench pingpong [N] N one-byte round trips parent -> child -> parent
//                        over two pipes: microseconds per round trip (two
//                        sleeps and two wake-ups; on one hart two context
//                        switches, on several a wake-up of another hart by
//                        IPI each way)
//   sysbench             the first four with their default N
//
// Each mode prints one line "MODE: key=value ..." (times from time_us(),
// fixed-point decimals: the kernel and user code use no floating point).

#include "types.h"
#include "user.h"
#include "fcntl.h"

#define LOOP_INSNS 8   // instructions per iteration of spin()'s loop

// Prints num/den with `decimals` digits after the point.
static void
putfix(uint64 num, uint64 den, int decimals)
{
  uint64 scale = 1;

  for(int i = 0; i < decimals; i++)
    scale *= 10;
  if(den == 0)
    den = 1;
  uint64 v = (num * scale + den / 2) / den;
  if(decimals == 0)
    printf("%lu", v);
  else
    printf("%lu.%0*lu", v / scale, decimals, v % scale);
}

static void
bench_getpid(uint64 n)
{
  uint64 t0 = time_us();

  for(uint64 i = 0; i < n; i++)
    getpid();
  uint64 us = time_us() - t0;
  printf("getpid: n=%lu us=%lu per_call_us=", n, us);
  putfix(us, n, 3);
  printf("\n");
}

// LOOP_INSNS instructions per iteration: 6 ALU ops, the counter, the branch.
static void
spin(uint64 n)
{
  uint64 a = 1, b = 2, c = 3;

  asm volatile(
    "1:\n"
    "  add  %1, %1, %2\n"
    "  xor  %2, %2, %1\n"
    "  slli %3, %1, 3\n"
    "  add  %2, %2, %3\n"
    "  srli %3, %2, 5\n"
    "  sub  %1, %1, %3\n"
    "  addi %0, %0, -1\n"
    "  bnez %0, 1b\n"
    : "+r"(n), "+r"(a), "+r"(b), "+r"(c));
}

static void
bench_cpu(uint64 n)
{
  uint64 t0 = time_us();
  spin(n);
  uint64 us = time_us() - t0;
  uint64 insns = n * LOOP_INSNS;

  printf("cpu: loops=%lu insns_per_loop=%d insns=%lu us=%lu mips=", n,
         LOOP_INSNS, insns, us);
  putfix(insns, us, 2);    // instructions per microsecond = MIPS
  printf("\n");
}

static void
bench_fork(uint64 n)
{
  uint64 t0 = time_us();

  for(uint64 i = 0; i < n; i++){
    int pid = fork();
    if(pid < 0){
      fprintf(2, "sysbench: fork failed\n");
      exit(1);
    }
    if(pid == 0)
      exit(0);
    wait(0);
  }
  uint64 us = time_us() - t0;
  printf("fork: n=%lu us=%lu per_fork_us=", n, us);
  putfix(us, n, 1);
  printf("\n");
}

static char buf[4096];

static void
bench_pipe(uint64 kib)
{
  int fds[2], pid, m;
  uint64 got = 0, t0;

  if(pipe(fds) < 0 || (pid = fork()) < 0){
    fprintf(2, "sysbench: pipe/fork failed\n");
    exit(1);
  }
  if(pid == 0){
    close(fds[0]);
    for(uint64 i = 0; i < kib / 4; i++)
      write(fds[1], buf, 4096);
    exit(0);
  }
  close(fds[1]);
  t0 = time_us();
  while((m = read(fds[0], buf, sizeof(buf))) > 0)
    got += m;
  uint64 us = time_us() - t0;
  close(fds[0]);
  wait(0);
  printf("pipe: kib=%lu us=%lu kib_per_s=", got / 1024, us);
  putfix(got / 1024 * 1000000, us, 0);
  printf("\n");
}

static void
bench_fs(uint64 n)
{
  int fd;
  uint64 t0 = time_us();

  for(uint64 i = 0; i < n; i++){
    if((fd = open("/fsbench.tmp", O_CREATE | O_WRONLY)) < 0 ||
       write(fd, buf, sizeof(buf)) != sizeof(buf) || close(fd) < 0 ||
       unlink("/fsbench.tmp") < 0){
      fprintf(2, "sysbench: fs: create/write/delete failed\n");
      exit(1);
    }
  }
  uint64 us = time_us() - t0;
  printf("fs: n=%lu us=%lu files_per_s=", n, us);
  putfix(n * 1000000, us, 1);
  printf("\n");
}

static void
bench_pingpong(uint64 n)
{
  int to[2], from[2], pid;
  char c = 'x';
  uint64 t0, us;

  if(pipe(to) < 0 || pipe(from) < 0 || (pid = fork()) < 0){
    fprintf(2, "sysbench: pipe/fork failed\n");
    exit(1);
  }
  if(pid == 0){
    close(to[1]);
    close(from[0]);
    while(read(to[0], &c, 1) == 1)
      write(from[1], &c, 1);
    exit(0);
  }
  close(to[0]);
  close(from[1]);
  t0 = time_us();
  for(uint64 i = 0; i < n; i++){
    if(write(to[1], &c, 1) != 1 || read(from[0], &c, 1) != 1){
      fprintf(2, "sysbench: pingpong broke\n");
      exit(1);
    }
  }
  us = time_us() - t0;
  close(to[1]);
  close(from[0]);
  wait(0);
  printf("pingpong: n=%lu us=%lu per_round_trip_us=", n, us);
  putfix(us, n, 1);
  printf("\n");
}

struct mode {
  char *name;
  void (*run)(uint64);
  uint64 n;            // default N
  int all;             // run by a plain `sysbench`
};

static struct mode modes[] = {
  { "getpid", bench_getpid, 20000, 1 },
  { "cpu", bench_cpu, 25000000, 1 },
  { "fork", bench_fork, 100, 1 },
  { "pipe", bench_pipe, 1024, 1 },
  { "fs", bench_fs, 200, 0 },
  { "pingpong", bench_pingpong, 2000, 0 },
};
#define NMODE (sizeof(modes) / sizeof(modes[0]))

int
main(int argc, char *argv[])
{
  char *end;
  uint64 n = 0;

  if(argc == 1){
    for(int i = 0; i < NMODE; i++)
      if(modes[i].all)
        modes[i].run(modes[i].n);
    return 0;
  }
  if(argc == 3){
    n = strtol(argv[2], &end, 10);
    if(end == argv[2] || *end != 0 || (long)n <= 0){
      fprintf(2, "sysbench: bad count %s\n", argv[2]);
      return 2;
    }
  }
  for(int i = 0; argc <= 3 && i < NMODE; i++){
    if(strcmp(argv[1], modes[i].name) == 0){
      modes[i].run(n ? n : modes[i].n);
      return 0;
    }
  }
  fprintf(2, "usage: sysbench [getpid|cpu|fork|pipe|fs|pingpong [N]]\n");
  return 2;
}
