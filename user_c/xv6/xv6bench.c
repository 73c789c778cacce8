// xv6bench: system-call micro-benchmarks timed from the host, built from
// this one source both against xv6-riscv's user library (in a copy of an
// xv6 checkout, for QEMU) and against ours (through the include shim that
// `harness bench qemu` writes), so the two machines run the same loops.
//
//   xv6bench MODE N [MODE N ...]
//     null N      N empty begin/end pairs: what the markers themselves cost
//     getpid N    N getpid() round trips
//     fork N      N fork + exit + wait
//     pingpong N  N one-byte round trips parent -> child -> parent over
//                 two pipes (two sleeps, two wake-ups, two switches)
//     exec N      N fork + exec("xv6bench -x") + wait
//   xv6bench -x   exit at once (the program `exec` runs)
//
// Each loop is bracketed by the lines "@@ begin MODE N" and "@@ end MODE
// N", and the run ends with "@@ exit". The host stamps the console bytes as
// they arrive and takes the time between the two lines: xv6's uptime()
// ticks every 100 ms, far too coarse, and the host's clock is the same
// for both machines. Only the xv6 user library's calls are used.

#include "kernel/types.h"
#include "user/user.h"

static void
mark(char *what, char *mode, int n)
{
  printf("@@ %s %s %d\n", what, mode, n);
}

static void
pingpong(int n)
{
  int there[2], back[2];
  char c = 'x';

  if(pipe(there) < 0 || pipe(back) < 0){
    printf("xv6bench: pipe failed\n");
    exit(1);
  }
  int pid = fork();
  if(pid < 0){
    printf("xv6bench: fork failed\n");
    exit(1);
  }
  if(pid == 0){
    close(there[1]);
    close(back[0]);
    while(read(there[0], &c, 1) == 1)
      write(back[1], &c, 1);
    exit(0);
  }
  close(there[0]);
  close(back[1]);
  for(int i = 0; i < n; i++){
    if(write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1){
      printf("xv6bench: pingpong broke at %d\n", i);
      exit(1);
    }
  }
  close(there[1]);
  close(back[0]);
  wait(0);
}

// fork n children one after the other; each exits at once, or execs
// "xv6bench -x" (which does) when exec_too is set.
static void
forks(int n, int exec_too)
{
  char *argv[] = { "xv6bench", "-x", 0 };

  for(int i = 0; i < n; i++){
    int pid = fork();
    if(pid < 0){
      printf("xv6bench: fork failed at %d\n", i);
      exit(1);
    }
    if(pid == 0){
      if(exec_too){
        exec(argv[0], argv);
        printf("xv6bench: exec failed\n");
        exit(1);
      }
      exit(0);
    }
    int status = -1;
    if(wait(&status) != pid || status != 0){
      printf("xv6bench: child %d failed\n", i);
      exit(1);
    }
  }
}

static void
run(char *mode, int n)
{
  if(strcmp(mode, "null") == 0){
    for(int i = 0; i < n; i++){
      mark("begin", mode, 1);
      mark("end", mode, 1);
    }
    return;
  }
  mark("begin", mode, n);
  if(strcmp(mode, "getpid") == 0){
    for(int i = 0; i < n; i++)
      getpid();
  } else if(strcmp(mode, "fork") == 0){
    forks(n, 0);
  } else if(strcmp(mode, "exec") == 0){
    forks(n, 1);
  } else if(strcmp(mode, "pingpong") == 0){
    pingpong(n);
  } else {
    printf("xv6bench: unknown mode %s\n", mode);
    exit(1);
  }
  mark("end", mode, n);
}

int
main(int argc, char *argv[])
{
  if(argc == 2 && strcmp(argv[1], "-x") == 0)
    exit(0);
  if(argc < 3 || argc % 2 == 0){
    printf("usage: xv6bench MODE N [MODE N ...] (null getpid fork pingpong exec)\n");
    exit(1);
  }
  for(int i = 1; i + 1 < argc; i += 2)
    run(argv[i], atoi(argv[i + 1]));
  printf("@@ exit\n");
  exit(0);
}
