// ut_fs.c: usertests for the file system: create/read/write/unlink, open
// modes, truncation, directories, links, open-but-unlinked files, many
// files, big files, concurrent writers, running out of inodes and blocks.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "user.h"
#include "utests.h"

// Fills buf with the bytes of file offset off..off+n of "pattern file" id.
static void
pattern(char *buf, int n, uint64 off, int id)
{
  for(int i = 0; i < n; i++)
    buf[i] = (char)((off + i) * 7 + id + (off + i) / 251);
}

// Writes `size` pattern bytes to path in `chunk`-sized writes.
static void
writepattern(char *s, char *path, uint64 size, int chunk, int id)
{
  int fd = open(path, O_CREATE | O_WRONLY | O_TRUNC);

  if(fd < 0)
    fail(s, "cannot create %s", path);
  for(uint64 off = 0; off < size; off += chunk){
    int n = size - off < chunk ? size - off : chunk;
    pattern(ubuf, n, off, id);
    if(write(fd, ubuf, n) != n)
      fail(s, "write %s at %lu failed", path, off);
  }
  close(fd);
}

// Reads path back and checks it holds `size` pattern bytes.
static void
checkpattern(char *s, char *path, uint64 size, int id)
{
  static char want[4096];
  int fd = open(path, O_RDONLY), n;
  uint64 off = 0;
  struct stat st;

  if(fd < 0)
    fail(s, "cannot open %s", path);
  if(fstat(fd, &st) < 0 || st.type != T_FILE || st.size != size)
    fail(s, "%s: fstat size %lu, want %lu", path, st.size, size);
  while((n = read(fd, ubuf, 3001)) > 0){
    pattern(want, n, off, id);
    if(memcmp(ubuf, want, n) != 0)
      fail(s, "%s: wrong data near offset %lu", path, off);
    off += n;
  }
  close(fd);
  if(n < 0 || off != size)
    fail(s, "%s: read %lu bytes, want %lu", path, off, size);
}

// create, write, close, read back, unlink
static void
createread(char *s)
{
  writepattern(s, "cr.file", 1000, 10, 1);
  checkpattern(s, "cr.file", 1000, 1);
  if(unlink("cr.file") != 0)
    fail(s, "unlink failed");
  if(open("cr.file", O_RDONLY) >= 0)
    fail(s, "unlinked file still opens");
  if(unlink("cr.file") != -1)
    fail(s, "second unlink did not fail");
}

// open modes are enforced
static void
openmodes(char *s)
{
  int fd;

  if(open("no-such-file", O_RDONLY) != -1)
    fail(s, "opened a missing file");
  if(open("", O_CREATE | O_RDWR) != -1)
    fail(s, "created a file with an empty name");
  writefile(s, "om.file", "hello", 5);
  if((fd = open("om.file", O_CREATE | O_RDWR)) < 0)
    fail(s, "O_CREATE on an existing file failed");
  close(fd);
  if(readfile(s, "om.file", ubuf, 100) != 5)
    fail(s, "O_CREATE truncated an existing file");
  fd = open("om.file", O_RDONLY);
  if(write(fd, "x", 1) != -1)
    fail(s, "wrote to an O_RDONLY descriptor");
  close(fd);
  fd = open("om.file", O_WRONLY);
  if(read(fd, ubuf, 1) != -1)
    fail(s, "read from an O_WRONLY descriptor");
  close(fd);
  if(open("/", O_RDWR) != -1 || open("/", O_WRONLY) != -1)
    fail(s, "opened a directory for writing");
  if((fd = open("/", O_RDONLY)) < 0)
    fail(s, "cannot open / for reading");
  close(fd);
  unlink("om.file");
}

// O_TRUNC empties a file
static void
truncate(char *s)
{
  int fd;

  writefile(s, "tr.file", "abcdefgh", 8);
  if((fd = open("tr.file", O_WRONLY | O_TRUNC)) < 0)
    fail(s, "open O_TRUNC failed");
  write(fd, "x", 1);
  close(fd);
  if(readfile(s, "tr.file", ubuf, 100) != 1 || ubuf[0] != 'x')
    fail(s, "file not truncated");
  unlink("tr.file");
}

// fstat reports types, sizes and link counts
static void
fstattest(char *s)
{
  struct stat st;
  int fd;

  writefile(s, "fs.file", "12345", 5);
  if(stat("fs.file", &st) < 0 || st.type != T_FILE || st.size != 5 ||
     st.nlink != 1)
    fail(s, "file: type %d size %lu nlink %d", st.type, st.size, st.nlink);
  if(stat("/", &st) < 0 || st.type != T_DIR)
    fail(s, "/ is not a directory");
  if((fd = open("/console", O_RDONLY)) < 0)
    fail(s, "cannot open /console");
  if(fstat(fd, &st) < 0 || st.type != T_DEVICE)
    fail(s, "/console is not a device");
  close(fd);
  unlink("fs.file");
}

// mkdir, chdir, relative and absolute paths, rmdir rules
static void
dirs(char *s)
{
  int fd;

  if(mkdir("dd") != 0)
    fail(s, "mkdir dd failed");
  if(mkdir("dd") != -1)
    fail(s, "mkdir of an existing name did not fail");
  writefile(s, "dd/ff", "ff", 2);
  if(chdir("dd") != 0)
    fail(s, "chdir dd failed");
  if(readfile(s, "ff", ubuf, 10) != 2 || readfile(s, "../dd/ff", ubuf, 10) != 2)
    fail(s, "cannot read ff through relative paths");
  if(readfile(s, "/dd/ff", ubuf, 10) != 2 || readfile(s, "./ff", ubuf, 10) != 2)
    fail(s, "cannot read ff through absolute paths");
  if(chdir("..") != 0)
    fail(s, "chdir .. failed");
  if(unlink("dd") != -1)
    fail(s, "removed a non-empty directory");
  if(unlink("dd/ff") != 0 || unlink("dd") != 0)
    fail(s, "cannot remove dd/ff, then dd");
  if(chdir("dd") != -1)
    fail(s, "chdir into a removed directory");
  if((fd = open("dd/ff", O_CREATE | O_RDWR)) != -1)
    fail(s, "created a file in a removed directory");
}

// . and .. cannot be removed; a file is not a directory
static void
dirrules(char *s)
{
  if(mkdir("dots") != 0 || chdir("dots") != 0)
    fail(s, "mkdir/chdir dots failed");
  if(unlink(".") != -1 || unlink("..") != -1)
    fail(s, "removed . or ..");
  if(chdir("/") != 0)
    fail(s, "chdir / failed");
  if(unlink("dots/.") != -1 || unlink("dots/..") != -1)
    fail(s, "removed dots/. or dots/..");
  if(unlink("dots") != 0)
    fail(s, "cannot remove dots");
  writefile(s, "df", "x", 1);
  if(mkdir("df/x") != -1)
    fail(s, "mkdir under a file");
  if(open("df/x", O_CREATE | O_RDWR) != -1)
    fail(s, "created a file under a file");
  if(chdir("df") != -1)
    fail(s, "chdir into a file");
  if(unlink("df/x") != -1)
    fail(s, "unlink under a file");
  if(link("df", "df/x") != -1)
    fail(s, "link under a file");
  unlink("df");
}

// hard links share the inode; the data lives until the last name goes
static void
links(char *s)
{
  struct stat st;

  writefile(s, "lk1", "linked", 6);
  if(link("lk1", "lk2") != 0)
    fail(s, "link failed");
  if(stat("lk2", &st) < 0 || st.nlink != 2)
    fail(s, "nlink is %d after link", st.nlink);
  if(unlink("lk1") != 0)
    fail(s, "unlink lk1 failed");
  if(readfile(s, "lk2", ubuf, 100) != 6 || memcmp(ubuf, "linked", 6) != 0)
    fail(s, "data lost through the second name");
  if(link("lk2", "lk2") != -1)
    fail(s, "link onto an existing name");
  if(link("no-such-file", "lk3") != -1)
    fail(s, "link of a missing file");
  if(link("/", "lkdir") != -1)
    fail(s, "link of a directory");
  unlink("lk2");
}

// an unlinked but open file stays readable; its name can be reused
static void
unlinkopen(char *s)
{
  int fd, n;

  writefile(s, "uo.file", "old contents", 12);
  if((fd = open("uo.file", O_RDONLY)) < 0)
    fail(s, "open failed");
  if(unlink("uo.file") != 0)
    fail(s, "unlink failed");
  writefile(s, "uo.file", "new", 3);
  n = read(fd, ubuf, 100);
  if(n != 12 || memcmp(ubuf, "old contents", 12) != 0)
    fail(s, "open file lost its data (read %d)", n);
  close(fd);
  if(readfile(s, "uo.file", ubuf, 100) != 3)
    fail(s, "new file has the wrong size");
  unlink("uo.file");
}

// dup shares the offset; descriptors run out cleanly
static void
fds(char *s)
{
  int fd, fd2, opened[200], n = 0;

  writefile(s, "fd.file", "abcdef", 6);
  fd = open("fd.file", O_RDONLY);
  fd2 = dup(fd);
  if(fd2 < 0 || read(fd, ubuf, 2) != 2 || read(fd2, ubuf, 10) != 4 ||
     ubuf[0] != 'c')
    fail(s, "dup does not share the offset");
  close(fd);
  close(fd2);
  while(n < 200 && (fd = open("fd.file", O_RDONLY)) >= 0)
    opened[n++] = fd;
  if(n == 200)
    fail(s, "200 open files and no limit");
  if(dup(0) != -1)
    fail(s, "dup worked with a full table");
  for(int i = 0; i < n; i++)
    if(close(opened[i]) != 0)
      fail(s, "close failed");
  if((fd = open("fd.file", O_RDONLY)) < 0)
    fail(s, "cannot open after closing everything");
  close(fd);
  if(close(fd) != -1)
    fail(s, "closed a closed descriptor");
  unlink("fd.file");
}

// Name of file i of a directory-filling test.
static void
fname(char *buf, char prefix, int i)
{
  buf[0] = prefix;
  buf[1] = '0' + i / 100;
  buf[2] = '0' + i / 10 % 10;
  buf[3] = '0' + i % 10;
  buf[4] = 0;
}

// Every process keeps as many distinct files open as it may, all at once: more
// files than the system-wide open-file table holds, each with its own inode.
// The in-memory inode table must outlast the open-file table (an exhausted
// inode table used to panic the kernel); opens past NFILE fail cleanly.
static void
allopen(char *s)
{
  enum { NKID = 10, PER = 13 };   // 10 x 13 distinct files > NFILE 128 > NINODE 64 (old)
  int ready[2], go[2], pid[NKID], st, got = 0;
  char name[8], c;

  for(int i = 0; i < NKID * PER; i++){
    fname(name, 'o', i);
    writefile(s, name, "x", 1);
  }
  if(pipe(ready) < 0 || pipe(go) < 0)
    fail(s, "pipe failed");
  for(int k = 0; k < NKID; k++){
    if((pid[k] = fork()) < 0)
      fail(s, "fork failed");
    if(pid[k] == 0){
      int n = 0;
      close(ready[0]);
      close(go[1]);
      for(int i = 0; i < PER; i++){
        fname(name, 'o', k * PER + i);
        if(open(name, O_RDONLY) >= 0)
          n++;
      }
      c = n;
      write(ready[1], &c, 1);
      read(go[0], &c, 1);        // hold them until the parent has counted
      exit(0);
    }
  }
  close(ready[1]);
  close(go[0]);
  for(int k = 0; k < NKID; k++){
    if(read(ready[0], &c, 1) != 1)
      fail(s, "a child died before reporting");
    got += c;
  }
  if(got < NKID * 8)
    fail(s, "only %d of %d distinct files could be open at once", got, NKID * PER);
  close(go[1]);                   // every child's read returns: they exit
  for(int k = 0; k < NKID; k++)
    if(wait(&st) < 0 || st != 0)
      fail(s, "a child failed");
  close(ready[0]);
  for(int i = 0; i < NKID * PER; i++){
    fname(name, 'o', i);
    if(unlink(name) != 0)
      fail(s, "unlink %s failed", name);
  }
}

// many files in one directory
static void
manyfiles(char *s)
{
  char name[8];

  for(int i = 0; i < 40; i++){
    fname(name, 'm', i);
    writepattern(s, name, 100 + i, 100 + i, i);
  }
  for(int i = 0; i < 40; i++){
    fname(name, 'm', i);
    checkpattern(s, name, 100 + i, i);
    if(unlink(name) != 0)
      fail(s, "unlink %s failed", name);
  }
}

// a file bigger than the direct blocks reach (indirect blocks)
static void
bigfile(char *s)
{
  writepattern(s, "big.file", 200 * 1024 + 123, 3000, 5);
  checkpattern(s, "big.file", 200 * 1024 + 123, 5);
  unlink("big.file");
}

// nested directories, walked by absolute and relative paths
static void
deepdir(char *s)
{
  char path[128] = "";

  for(int i = 0; i < 10; i++){
    strcat(path, i ? "/dp" : "dp");
    if(mkdir(path) != 0)
      fail(s, "mkdir %s failed", path);
  }
  strcat(path, "/leaf");
  writefile(s, path, "deep", 4);
  for(int i = 0; i < 10; i++)
    if(chdir("dp") != 0)
      fail(s, "chdir down failed");
  if(readfile(s, "leaf", ubuf, 10) != 4)
    fail(s, "leaf unreadable");
  if(chdir("/") != 0)
    fail(s, "chdir / failed");
  // remove leaf, then each directory from the bottom up
  for(;;){
    if(unlink(path) != 0)
      fail(s, "unlink %s failed", path);
    char *slash = strrchr(path, '/');
    if(slash == 0)
      break;
    *slash = 0;
  }
}

// two processes writing through one shared descriptor lose nothing
static void
sharedfd(char *s)
{
  int fd, pid, n, na = 0, nb = 0;

  if((fd = open("sh.file", O_CREATE | O_RDWR | O_TRUNC)) < 0)
    fail(s, "create failed");
  if((pid = fork()) < 0)
    fail(s, "fork failed");
  memset(ubuf, pid == 0 ? 'a' : 'b', 10);
  for(int i = 0; i < 100; i++)
    if(write(fd, ubuf, 10) != 10)
      fail(s, "write failed");
  if(pid == 0)
    exit(0);
  if(waitfor(s, pid) != 0)
    fail(s, "child failed");
  close(fd);
  fd = open("sh.file", O_RDONLY);
  while((n = read(fd, ubuf, sizeof(ubuf))) > 0)
    for(int i = 0; i < n; i++){
      na += ubuf[i] == 'a';
      nb += ubuf[i] == 'b';
    }
  close(fd);
  unlink("sh.file");
  if(na != 1000 || nb != 1000)
    fail(s, "%d a's and %d b's, want 1000 each", na, nb);
}

// several processes creating, writing and deleting files at once
static void
concurrent(char *s)
{
  int pids[3];
  char name[8];

  for(int p = 0; p < 3; p++){
    if((pids[p] = fork()) < 0)
      fail(s, "fork failed");
    if(pids[p] == 0){
      for(int i = 0; i < 8; i++){
        fname(name, 'a' + p, i);
        writepattern(s, name, 2000 + i * 512, 700, p);
      }
      for(int i = 0; i < 8; i += 2){
        fname(name, 'a' + p, i);
        if(unlink(name) != 0)
          fail(s, "unlink %s failed", name);
      }
      exit(0);
    }
  }
  for(int p = 0; p < 3; p++)
    if(waitfor(s, pids[p]) != 0)
      fail(s, "writer %d failed", p);
  for(int p = 0; p < 3; p++)
    for(int i = 0; i < 8; i++){
      fname(name, 'a' + p, i);
      if(i % 2 == 0){
        if(open(name, O_RDONLY) != -1)
          fail(s, "%s should be gone", name);
      } else {
        checkpattern(s, name, 2000 + i * 512, p);
        unlink(name);
      }
    }
}

// ---------------------------------------------------------------- slow

// a large file, written in odd-sized chunks
static void
hugefile(char *s)
{
  writepattern(s, "huge.file", 1536 * 1024 + 7, 4001, 9);
  checkpattern(s, "huge.file", 1536 * 1024 + 7, 9);
  unlink("huge.file");
}

// a directory with hundreds of entries (all links to one file)
static void
bigdir(char *s)
{
  char name[8];

  writefile(s, "bd.file", "x", 1);
  for(int i = 0; i < 400; i++){
    fname(name, 'b', i);
    if(link("bd.file", name) != 0)
      fail(s, "link %s failed", name);
  }
  unlink("bd.file");
  for(int i = 0; i < 400; i++){
    fname(name, 'b', i);
    if(unlink(name) != 0)
      fail(s, "unlink %s failed", name);
  }
}

// create files until inodes run out; then everything is removed again
static void
outofinodes(char *s)
{
  char name[8];
  int n, fd;

  if(mkdir("inodes") != 0 || chdir("inodes") != 0)
    fail(s, "mkdir inodes failed");
  for(n = 0; n < 2000; n++){
    name[0] = 'i';
    name[1] = '0' + n / 1000;
    name[2] = '0' + n / 100 % 10;
    name[3] = '0' + n / 10 % 10;
    name[4] = '0' + n % 10;
    name[5] = 0;
    if((fd = open(name, O_CREATE | O_RDWR)) < 0)
      break;
    close(fd);
  }
  if(n == 2000)
    fail(s, "2000 files and inodes did not run out");
  for(int i = 0; i < n; i++){
    name[1] = '0' + i / 1000;
    name[2] = '0' + i / 100 % 10;
    name[3] = '0' + i / 10 % 10;
    name[4] = '0' + i % 10;
    if(unlink(name) != 0)
      fail(s, "unlink %s failed", name);
  }
  chdir("/");
  if(unlink("inodes") != 0)
    fail(s, "rmdir inodes failed");
  writefile(s, "after.inodes", "ok", 2);
  unlink("after.inodes");
}

// Name of filler file i of diskfull.
static char *
fillname(int i)
{
  static char name[8];

  fname(name, 'F', i);
  return name;
}

// write files until the disk is full: writes fail, nothing breaks, and
// the space comes back when the files are removed
static void
diskfull(char *s)
{
  int fd, n, nfiles;
  uint64 size, total = 0;

  memset(ubuf, 'f', sizeof(ubuf));
  for(nfiles = 0; nfiles < 1000; nfiles++){
    if((fd = open(fillname(nfiles), O_CREATE | O_WRONLY | O_TRUNC)) < 0)
      break;
    // until the file reaches its maximum size or the disk is full
    size = 0;
    while((n = write(fd, ubuf, sizeof(ubuf))) > 0){
      size += n;
      if(n < sizeof(ubuf))
        break;
    }
    close(fd);
    total += size;
    if(size < sizeof(ubuf)){
      // a fresh file could not take one buffer: the disk is full
      nfiles++;
      break;
    }
  }
  if(nfiles == 1000)
    fail(s, "disk never filled (%lu bytes written)", total);
  for(int i = 0; i < nfiles; i++)
    if(unlink(fillname(i)) != 0)
      fail(s, "unlink %s failed", fillname(i));
  writepattern(s, "after.full", 64 * 1024, 1000, 3);
  checkpattern(s, "after.full", 64 * 1024, 3);
  unlink("after.full");
}

struct test fs_quick[] = {
  { createread, "createread" },
  { openmodes, "openmodes" },
  { truncate, "truncate" },
  { fstattest, "fstat" },
  { dirs, "dirs" },
  { dirrules, "dirrules" },
  { links, "links" },
  { unlinkopen, "unlinkopen" },
  { fds, "fds" },
  { manyfiles, "manyfiles" },
  { allopen, "allopen" },
  { bigfile, "bigfile" },
  { deepdir, "deepdir" },
  { sharedfd, "sharedfd" },
  { concurrent, "concurrent" },
  { 0, 0 },
};

struct test fs_slow[] = {
  { hugefile, "hugefile" },
  { bigdir, "bigdir" },
  { outofinodes, "outofinodes" },
  { diskfull, "diskfull" },
  { 0, 0 },
};
