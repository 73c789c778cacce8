// ln: make a hard link NEW to the existing file OLD.

#include "types.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  if(argc != 3){
    fprintf(2, "usage: ln OLD NEW\n");
    return 2;
  }
  if(link(argv[1], argv[2]) < 0){
    fprintf(2, "ln: cannot link %s to %s\n", argv[2], argv[1]);
    return 1;
  }
  return 0;
}
