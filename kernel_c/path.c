// path.c: path names element by element, and directory-entry name
// comparison: the parts of name lookup that touch no inode (fs.c's namex()
// walks the directories with them). Pure functions: tests/host_c/ compiles
// this file on the host with AddressSanitizer.

#include "types.h"
#include "riscv.h"
#include "fs.h"
#include "defs.h"

// Compare two directory-entry names (at most DIRSIZ bytes; a name of
// exactly DIRSIZ bytes has no NUL).
int
namecmp(const char *s, const char *t)
{
  return strncmp(s, t, DIRSIZ);
}

// Copy the next path element of path into name (at most DIRSIZ bytes) and
// return what follows it, without leading slashes; 0 if there is none.
//   skipelem("a/bb/c", name) = "bb/c", name = "a"
//   skipelem("///a//bb", name) = "bb", name = "a"
//   skipelem("", name) = skipelem("////", name) = 0
char*
skipelem(char *path, char *name)
{
  char *s;
  int len;

  while(*path == '/')
    path++;
  if(*path == 0)
    return 0;
  s = path;
  while(*path != '/' && *path != 0)
    path++;
  len = path - s;
  if(len >= DIRSIZ)
    memmove(name, s, DIRSIZ);
  else {
    memmove(name, s, len);
    name[len] = 0;
  }
  while(*path == '/')
    path++;
  return path;
}
