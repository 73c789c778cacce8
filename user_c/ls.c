// ls: list directories (or describe files).
// One line per entry: name, type (dir, file, dev), inode number, size.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "param.h"
#include "fs.h"
#include "user.h"

static const char *
typename(int type)
{
  switch(type){
  case T_DIR: return "dir";
  case T_FILE: return "file";
  case T_DEVICE: return "dev";
  }
  return "?";
}

static void
show(const char *name, struct stat *st)
{
  printf("%-14s %-4s %4d %8lu\n", name, typename(st->type), st->ino, st->size);
}

// Lists path; returns 0, or 1 after printing an error.
static int
ls(const char *path)
{
  char buf[MAXPATH];
  struct dirent de;
  struct stat st;
  int fd, len;

  if((fd = open(path, O_RDONLY)) < 0){
    fprintf(2, "ls: cannot open %s\n", path);
    return 1;
  }
  if(fstat(fd, &st) < 0){
    fprintf(2, "ls: cannot stat %s\n", path);
    close(fd);
    return 1;
  }
  if(st.type != T_DIR){
    show(path, &st);
    close(fd);
    return 0;
  }
  len = strlen(path);
  if(len + 1 + DIRSIZ + 1 > sizeof(buf)){
    fprintf(2, "ls: path too long\n");
    close(fd);
    return 1;
  }
  strcpy(buf, path);
  buf[len++] = '/';
  while(read(fd, &de, sizeof(de)) == sizeof(de)){
    if(de.inum == 0)
      continue;
    memmove(buf + len, de.name, DIRSIZ);
    buf[len + DIRSIZ] = 0;
    if(stat(buf, &st) < 0){
      fprintf(2, "ls: cannot stat %s\n", buf);
      continue;
    }
    show(buf + len, &st);
  }
  close(fd);
  return 0;
}

int
main(int argc, char *argv[])
{
  int status = 0;

  if(argc < 2)
    return ls(".");
  for(int i = 1; i < argc; i++)
    status |= ls(argv[i]);
  return status;
}
