// ut_proc.c: usertests for processes and pipes: fork, exit status, wait,
// re-parenting, kill, preemption, exec, fork exhaustion, sleep, procinfo.

#include "types.h"
#include "fcntl.h"
#include "procinfo.h"
#include "user.h"
#include "utests.h"

// exit statuses arrive intact, each with the right pid
static void
exitwait(char *s)
{
  int pids[20], st, pid;

  for(int i = 0; i < 20; i++){
    if((pids[i] = fork()) < 0)
      fail(s, "fork failed");
    if(pids[i] == 0)
      exit(i == 19 ? -7 : i * 3);
  }
  for(int n = 0; n < 20; n++){
    if((pid = wait(&st)) < 0)
      fail(s, "wait failed after %d children", n);
    int i;
    for(i = 0; i < 20 && pids[i] != pid; i++)
      ;
    if(i == 20)
      fail(s, "wait returned unknown pid %d", pid);
    if(st != (i == 19 ? -7 : i * 3))
      fail(s, "child %d exited %d, wait says %d", i, i * 3, st);
    pids[i] = -1;
  }
  if(wait(0) != -1)
    fail(s, "wait with no children did not fail");
}

// wait(0) is allowed; a parent without children gets -1
static void
waitnull(char *s)
{
  int pid = fork();

  if(pid < 0)
    fail(s, "fork failed");
  if(pid == 0)
    exit(0);
  if(wait(0) != pid)
    fail(s, "wait(0) did not return the child's pid");
  if(wait(0) != -1)
    fail(s, "second wait did not fail");
}

// Own parent's pid from the process table, or -1.
static int
myppid(void)
{
  static struct procinfo rows[64];
  int n = procinfo(rows, 64), me = getpid();

  for(int i = 0; i < n; i++)
    if(rows[i].pid == me)
      return rows[i].ppid;
  return -1;
}

// an orphan is re-parented to init (pid 1), which reaps it
static void
reparent(char *s)
{
  int fds[2], pid;
  char c = 0;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  if(pid == 0){
    if(fork() == 0){
      // grandchild: wait for the middle process to go away
      int ppid = myppid();
      for(int i = 0; i < 200 && ppid != 1; i++){
        sleep(1);
        ppid = myppid();
      }
      write(fds[1], ppid == 1 ? "y" : "n", 1);
      exit(0);
    }
    exit(0);
  }
  close(fds[1]);
  if(waitfor(s, pid) != 0)
    fail(s, "middle process failed");
  if(read(fds[0], &c, 1) != 1 || c != 'y')
    fail(s, "orphan was not re-parented to init");
  close(fds[0]);
}

// forks a child that runs `kind` forever: 0 = spin, 1 = sleep, 2 = read
// an empty pipe (fds stays open in the parent)
static int
forever(char *s, int kind, int *fds)
{
  int pid = fork();

  if(pid < 0)
    fail(s, "fork failed");
  if(pid == 0){
    char c;
    volatile int x = 0;
    for(;;){
      if(kind == 0)
        x++;
      else if(kind == 1)
        sleep(1000);
      else
        read(fds[0], &c, 1);
    }
  }
  return pid;
}

// kill ends a running, a sleeping and a pipe-blocked process; status -1
static void
killtest(char *s)
{
  int fds[2], pids[3], st;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  for(int kind = 0; kind < 3; kind++)
    pids[kind] = forever(s, kind, fds);
  sleep(2);
  for(int kind = 0; kind < 3; kind++){
    if(kill(pids[kind]) != 0)
      fail(s, "kill(%d) failed", pids[kind]);
    if((st = waitfor(s, pids[kind])) != -1)
      fail(s, "killed child (kind %d) exited %d, not -1", kind, st);
  }
  close(fds[0]);
  close(fds[1]);
  if(kill(99999) != -1 || kill(-1) != -1 || kill(0) != -1)
    fail(s, "kill of a nonexistent pid did not fail");
}

// the timer preempts busy children, so the parent and a third child run
static void
preempt(char *s)
{
  int fds[2], pid1, pid2, pid3;
  char c;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  pid1 = forever(s, 0, 0);
  pid2 = forever(s, 0, 0);
  if((pid3 = fork()) < 0)
    fail(s, "fork failed");
  if(pid3 == 0){
    close(fds[0]);
    write(fds[1], "x", 1);
    for(;;)
      ;
  }
  close(fds[1]);
  if(read(fds[0], &c, 1) != 1)
    fail(s, "third child never ran");
  close(fds[0]);
  kill(pid1);
  kill(pid2);
  kill(pid3);
  waitfor(s, pid1);
  waitfor(s, pid2);
  waitfor(s, pid3);
}

// Runs /echo with argv in a child whose stdout is path; returns status.
static int
echoto(char *s, char *path, char **argv)
{
  int pid = fork();

  if(pid < 0)
    fail(s, "fork failed");
  if(pid == 0){
    close(1);
    if(open(path, O_CREATE | O_WRONLY | O_TRUNC) != 1)
      exit(2);
    exec("/echo", argv);
    exit(3);
  }
  return waitfor(s, pid);
}

// exec replaces the image, keeps fds, passes argv
static void
exectest(char *s)
{
  char *argv[] = { "echo", "OK", "two words", 0 };
  int n;

  if(echoto(s, "execout", argv) != 0)
    fail(s, "echo child failed");
  n = readfile(s, "execout", ubuf, sizeof(ubuf) - 1);
  ubuf[n] = 0;
  if(strcmp(ubuf, "OK two words\n") != 0)
    fail(s, "wrong output '%s'", ubuf);
  unlink("execout");
}

// many arguments work; far too many fail cleanly
static void
execargs(char *s)
{
  static char *argv[1002];
  char expect[64] = "";
  int n;

  argv[0] = "echo";
  for(int i = 1; i <= 20; i++)
    argv[i] = "a";
  argv[21] = 0;
  for(int i = 0; i < 20; i++)
    strcat(expect, i ? " a" : "a");
  strcat(expect, "\n");
  if(echoto(s, "execargs", argv) != 0)
    fail(s, "echo with 20 args failed");
  n = readfile(s, "execargs", ubuf, sizeof(ubuf) - 1);
  ubuf[n] = 0;
  if(strcmp(ubuf, expect) != 0)
    fail(s, "wrong output '%s'", ubuf);
  unlink("execargs");
  for(int i = 1; i <= 1000; i++)
    argv[i] = "too many";
  argv[1001] = 0;
  if(exec("/echo", argv) != -1)
    fail(s, "exec with 1000 args did not fail");
}

// exec of things that are not programs fails and the caller goes on
static void
execbad(char *s)
{
  char *argv[] = { "x", 0 };
  char elf[256];

  if(exec("/no-such-program", argv) != -1)
    fail(s, "exec of a missing file did not fail");
  if(exec("/", argv) != -1)
    fail(s, "exec of a directory did not fail");
  writefile(s, "notelf", "just some text, not a program\n", 30);
  if(exec("notelf", argv) != -1)
    fail(s, "exec of a text file did not fail");
  // ELF magic followed by nonsense headers
  memset(elf, 0xff, sizeof(elf));
  memmove(elf, "\x7f" "ELF\x02\x01\x01", 7);
  writefile(s, "badelf", elf, sizeof(elf));
  if(exec("badelf", argv) != -1)
    fail(s, "exec of a corrupt ELF did not fail");
  // a truncated real program
  int n = readfile(s, "/echo", ubuf, sizeof(ubuf));
  writefile(s, "halfelf", ubuf, n / 2);
  if(exec("halfelf", argv) != -1)
    fail(s, "exec of a truncated ELF did not fail");
  unlink("notelf");
  unlink("badelf");
  unlink("halfelf");
}

// fork until the kernel says no; then everything is cleaned up
static void
forkbomb(char *s)
{
  int fds[2], n = 0, pid;
  char c;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  for(;;){
    pid = fork();
    if(pid < 0)
      break;
    if(pid == 0){
      // wait for the parent to close the pipe, then leave
      close(fds[1]);
      read(fds[0], &c, 1);
      exit(0);
    }
    if(++n > 100000)
      fail(s, "fork never failed");
  }
  if(n < 4)
    fail(s, "only %d forks before fork failed", n);
  close(fds[0]);
  close(fds[1]);
  for(int i = 0; i < n; i++)
    if(wait(0) < 0)
      fail(s, "wait failed after %d of %d children", i, n);
  if(wait(0) != -1)
    fail(s, "more children than forks");
  // the process table has room again
  if((pid = fork()) < 0)
    fail(s, "fork fails after the bomb");
  if(pid == 0)
    exit(0);
  waitfor(s, pid);
}

// data arrives in order through a pipe written in odd-sized chunks; the
// reader sees end of file when the writer is gone
static void
pipedata(char *s)
{
  int fds[2], pid, n, total = 0, seq = 0, sent = 0;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  for(int i = 1; i <= 40; i++)
    sent += (i * 397) % 2000 + 1;
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  if(pid == 0){
    close(fds[0]);
    for(int i = 1; i <= 40; i++){
      int len = (i * 397) % 2000 + 1;
      for(int j = 0; j < len; j++)
        ubuf[j] = seq++;
      if(write(fds[1], ubuf, len) != len)
        fail(s, "pipe write failed");
    }
    exit(0);
  }
  close(fds[1]);
  while((n = read(fds[0], ubuf, (total % 3000) + 1)) > 0){
    for(int j = 0; j < n; j++)
      if((uchar)ubuf[j] != (uchar)seq++)
        fail(s, "wrong byte at offset %d", total + j);
    total += n;
  }
  if(n < 0)
    fail(s, "pipe read failed");
  if(total != sent)
    fail(s, "read %d bytes, sent %d", total, sent);
  close(fds[0]);
  if(waitfor(s, pid) != 0)
    fail(s, "writer failed");
}

// writing to a pipe nobody can read fails (the writer is not stuck)
static void
pipeclosed(char *s)
{
  int fds[2];

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  close(fds[0]);
  if(write(fds[1], "x", 1) != -1)
    fail(s, "write to a pipe without readers did not fail");
  close(fds[1]);
  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  close(fds[1]);
  if(read(fds[0], ubuf, 10) != 0)
    fail(s, "read from a pipe without writers did not return 0");
  close(fds[0]);
}

// sleep sleeps; time_us and uptime move forward
static void
sleeptime(char *s)
{
  uint64 t0 = time_us(), t1;
  int u0 = uptime(), u1;

  if(sleep(3) != 0)
    fail(s, "sleep(3) failed");
  t1 = time_us();
  u1 = uptime();
  if(u1 - u0 < 3)
    fail(s, "uptime moved %d ticks in sleep(3)", u1 - u0);
  if(t1 <= t0)
    fail(s, "time_us did not advance (%lu, %lu)", t0, t1);
  for(int i = 0; i < 100; i++){
    uint64 t = time_us();
    if(t < t1)
      fail(s, "time_us went backwards");
    t1 = t;
  }
  if(sleep(0) != 0 || sleep(-5) != -1)
    fail(s, "sleep(0) or sleep(-5) wrong");
}

// procinfo lists this process with its name, parent and memory size
static void
proctable(char *s)
{
  static struct procinfo rows[64];
  int n, me = getpid(), found = 0, sawinit = 0;

  n = procinfo(rows, 64);
  if(n < 3)
    fail(s, "procinfo returned %d rows", n);
  for(int i = 0; i < n; i++){
    if(rows[i].pid == 1 && strcmp(rows[i].name, "init") == 0)
      sawinit = 1;
    if(rows[i].pid != me)
      continue;
    found = 1;
    if(strcmp(rows[i].name, "usertests") != 0)
      fail(s, "my name is '%s'", rows[i].name);
    if(rows[i].sz == 0 || rows[i].sz > 64 * 1024 * 1024)
      fail(s, "my size is %lu", rows[i].sz);
    if(rows[i].ppid <= 1)
      fail(s, "my parent is %d", rows[i].ppid);
  }
  if(!found || !sawinit)
    fail(s, "procinfo misses me or init");
  if(procinfo(rows, 1) != 1)
    fail(s, "procinfo(rows, 1) did not return 1");
  if(procinfo(rows, 0) != 0)
    fail(s, "procinfo(rows, 0) did not return 0");
}

// several processes forking and exiting at the same time
static void
forkstorm(char *s)
{
  int pids[4];

  for(int i = 0; i < 4; i++){
    if((pids[i] = fork()) < 0)
      fail(s, "fork failed");
    if(pids[i] == 0){
      for(int j = 0; j < 60; j++){
        int pid = fork();
        if(pid < 0)
          continue;   // the table may be full for a moment
        if(pid == 0)
          exit(j);
        if(waitfor(s, pid) != j)
          fail(s, "wrong status");
      }
      exit(0);
    }
  }
  for(int i = 0; i < 4; i++)
    if(waitfor(s, pids[i]) != 0)
      fail(s, "child %d failed", i);
}

// a big transfer through a pipe
static void
pipebig(char *s)
{
  int fds[2], pid, n;
  uint64 total = 0, sum = 0, want = 0;

  if(pipe(fds) < 0)
    fail(s, "pipe failed");
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  if(pid == 0){
    close(fds[0]);
    for(int i = 0; i < 256; i++){
      memset(ubuf, i, 4096);
      if(write(fds[1], ubuf, 4096) != 4096)
        fail(s, "write failed");
    }
    exit(0);
  }
  close(fds[1]);
  for(int i = 0; i < 256; i++)
    want += (uint64)i * 4096;
  while((n = read(fds[0], ubuf, sizeof(ubuf))) > 0){
    for(int j = 0; j < n; j++)
      sum += (uchar)ubuf[j];
    total += n;
  }
  close(fds[0]);
  if(total != 256 * 4096 || sum != want)
    fail(s, "got %lu bytes, checksum %lu (want %lu)", total, sum, want);
  waitfor(s, pid);
}

struct test proc_quick[] = {
  { exitwait, "exitwait" },
  { waitnull, "waitnull" },
  { reparent, "reparent" },
  { killtest, "kill" },
  { preempt, "preempt" },
  { exectest, "exec" },
  { execargs, "execargs" },
  { execbad, "execbad" },
  { forkbomb, "forkbomb" },
  { pipedata, "pipedata" },
  { pipeclosed, "pipeclosed" },
  { sleeptime, "sleep" },
  { proctable, "procinfo" },
  { 0, 0 },
};

struct test proc_slow[] = {
  { forkstorm, "forkstorm" },
  { pipebig, "pipebig" },
  { 0, 0 },
};
