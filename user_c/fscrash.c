// fscrash: the file-system workload of `harness crashtest` (harness/crashtest.py).
//
//   fscrash [ROUNDS]   ROUNDS rounds (default 1) of creating, writing,
//                      linking, truncating and deleting files under /c
//
// After each system call that changes the file system it prints a line
// "@N" (N counts them), so the harness knows which calls had returned when
// it cut the power: the disk then must hold everything up to call N, and
// call N+1 either whole or not at all. File contents are a pattern of the
// file's name and the round, so a block landing in the wrong file shows.
// Exit status 0 if every call did what it should.

#include "types.h"
#include "user.h"
#include "fcntl.h"

static int calls;
static char buf[16 * 1024];

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

int
main(int argc, char *argv[])
{
  int r, rounds = argc > 1 ? atoi(argv[1]) : 1;
  char name[32];

  if(rounds < 1){
    fprintf(2, "usage: fscrash [ROUNDS]\n");
    return 2;
  }
  done(mkdir("/c") == 0, "mkdir", "/c");
  for(r = 0; r < rounds; r++){
    strcpy(name, "/c/dX");
    name[4] = '0' + r % 10;
    done(mkdir(name) == 0, "mkdir", name);
    put("/c/small", r, 100, 0);
    put("/c/big", r, 14 * 1024, 0);           // into the indirect block
    done(link("/c/small", "/c/hard") == 0, "link", "/c/hard");
    done(unlink("/c/small") == 0, "unlink", "/c/small");
    put("/c/big", r + 1, 3000, O_TRUNC);       // frees blocks, allocates new
    strcpy(name + 5, "/f");
    put(name, r, 2500, 0);
    done(unlink(name) == 0, "unlink", name);
    name[5] = 0;
    done(unlink(name) == 0, "unlink", name);
    done(unlink("/c/hard") == 0, "unlink", "/c/hard");
    done(unlink("/c/big") == 0, "unlink", "/c/big");
  }
  printf("fscrash: %d calls OK\n", calls);
  return 0;
}
