// cat: copy files (or standard input) to standard output.

#include "types.h"
#include "fcntl.h"
#include "user.h"

static char buf[4096];

// Copies fd to stdout. Returns 0, or -1 after printing what went wrong.
static int
copy(int fd, const char *name)
{
  int n;

  while((n = read(fd, buf, sizeof(buf))) > 0){
    if(write(1, buf, n) != n){
      fprintf(2, "cat: write error\n");
      return -1;
    }
  }
  if(n < 0){
    fprintf(2, "cat: read error on %s\n", name);
    return -1;
  }
  return 0;
}

int
main(int argc, char *argv[])
{
  int fd, status = 0;

  if(argc <= 1)
    return copy(0, "standard input") < 0;
  for(int i = 1; i < argc; i++){
    if(strcmp(argv[i], "-") == 0){
      status |= copy(0, "standard input") < 0;
      continue;
    }
    if((fd = open(argv[i], O_RDONLY)) < 0){
      fprintf(2, "cat: cannot open %s\n", argv[i]);
      status = 1;
      continue;
    }
    status |= copy(fd, argv[i]) < 0;
    close(fd);
  }
  return status;
}
