// halt, poweroff: power the machine off. The optional status becomes the
// exit status of `harness run`.

#include "types.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  int status = 0;
  char *end;

  if(argc > 2){
    fprintf(2, "usage: %s [STATUS]\n", argv[0]);
    return 2;
  }
  if(argc == 2){
    status = strtol(argv[1], &end, 10);
    if(end == argv[1] || *end != 0){
      fprintf(2, "%s: bad status %s\n", argv[0], argv[1]);
      return 2;
    }
  }
  halt(status);
  fprintf(2, "%s: halt failed\n", argv[0]);
  return 1;
}
