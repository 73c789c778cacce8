// fscrash: the file-system workload of `harness crashtest` (harness/disk/crashtest.py).
//
//   fscrash [ROUNDS [PROCS]]  ROUNDS rounds (default 1) of creating,
//                      writing, linking, truncating and deleting files
//                      under /c; with PROCS > 1, that many processes at
//                      once, each in its own /c/pK (their calls share log
//                      transactions: group commit)
//
// After each system call that changes the file system it prints a line
// "@N" (N counts them), so the harness knows which calls had returned when
// it cut the power. File contents are a pattern of the file's name and
// the round, so a block landing in the wrong file shows. Exit status 0 if
// every call did what it should.

#include "types.h"
#include "user.h"
#include "fcntl.h"

static int calls;
static char buf[16 * 1024];
static char dir[8] = "/c";     // this process's directory

// The call returned `ok`; print the marker or give up.
static void
done(int ok, char *what, char *path)
{
  if(!ok){
    fprintf(2, "fscrash: %s %s failed\n", what, path);
    exit(1);
  }
  printf("@%d\n", ++calls);
}

static void
pattern(char *path, int round, int n)
{
  int i, len = strlen(path);

  for(i = 0; i < n; i++)
    buf[i] = 'a' + (path[i % len] + round + i / 1024) % 26;
}

// dir/name, in a static buffer of its own per argument position
static char*
at(int which, char *name)
{
  static char paths[2][32];

  strcpy(paths[which], dir);
  strcpy(paths[which] + strlen(dir), name);
  return paths[which];
}

// Create (or truncate) path and write n bytes, then close it: three calls
// (a long write is several log operations, each its own marker only at the
// end: the kernel may keep a prefix of it).
static void
put(char *path, int round, int n, int flags)
{
  int fd;

  fd = open(path, O_CREATE | O_WRONLY | flags);
  done(fd >= 0, "open", path);
  pattern(path, round, n);
  done(write(fd, buf, n) == n, "write", path);
  done(close(fd) == 0, "close", path);
}

static void
work(int rounds)
{
  int r;
  char name[8];

  for(r = 0; r < rounds; r++){
    strcpy(name, "/dX");
    name[2] = '0' + r % 10;
    done(mkdir(at(0, name)) == 0, "mkdir", at(0, name));
    put(at(0, "/small"), r, 100, 0);
    put(at(0, "/big"), r, 14 * 1024, 0);      // into the indirect block
    done(link(at(0, "/small"), at(1, "/hard")) == 0, "link", at(1, "/hard"));
    done(unlink(at(0, "/small")) == 0, "unlink", at(0, "/small"));
    put(at(0, "/big"), r + 1, 3000, O_TRUNC);  // frees blocks, allocates new
    strcpy(name + 3, "/f");
    put(at(0, name), r, 2500, 0);
    done(unlink(at(0, name)) == 0, "unlink", at(0, name));
    name[3] = 0;
    done(unlink(at(0, name)) == 0, "unlink", at(0, name));
    done(unlink(at(0, "/hard")) == 0, "unlink", at(0, "/hard"));
    done(unlink(at(0, "/big")) == 0, "unlink", at(0, "/big"));
  }
}

int
main(int argc, char *argv[])
{
  int p, status, failed = 0;
  int rounds = argc > 1 ? atoi(argv[1]) : 1;
  int procs = argc > 2 ? atoi(argv[2]) : 1;

  if(rounds < 1 || procs < 1 || procs > 8){
    fprintf(2, "usage: fscrash [ROUNDS [PROCS (1-8)]]\n");
    return 2;
  }
  done(mkdir("/c") == 0, "mkdir", "/c");
  if(procs == 1){
    work(rounds);
    printf("fscrash: %d calls OK\n", calls);
    return 0;
  }
  for(p = 0; p < procs; p++){
    strcpy(dir, "/c/p0");
    dir[4] = '0' + p;
    done(mkdir(dir) == 0, "mkdir", dir);
    if(fork() == 0){
      work(rounds);
      exit(0);
    }
  }
  for(p = 0; p < procs; p++)
    if(wait(&status) < 0 || status != 0)
      failed = 1;
  if(failed){
    fprintf(2, "fscrash: a worker failed\n");
    return 1;
  }
  printf("fscrash: %d processes, %d rounds each: calls OK\n", procs, rounds);
  return 0;
}
