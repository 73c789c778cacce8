// mkdir: create directories.

#include "types.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  int status = 0;

  if(argc < 2){
    fprintf(2, "usage: mkdir DIR...\n");
    return 2;
  }
  for(int i = 1; i < argc; i++){
    if(mkdir(argv[i]) < 0){
      fprintf(2, "mkdir: cannot create %s\n", argv[i]);
      status = 1;
    }
  }
  return status;
}
