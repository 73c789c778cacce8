// rm: remove directory entries (files, or empty directories).

#include "types.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  int status = 0;

  if(argc < 2){
    fprintf(2, "usage: rm FILE...\n");
    return 2;
  }
  for(int i = 1; i < argc; i++){
    if(unlink(argv[i]) < 0){
      fprintf(2, "rm: cannot remove %s\n", argv[i]);
      status = 1;
    }
  }
  return status;
}
