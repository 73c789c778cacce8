// kill: kill processes by pid.

#include "types.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  int status = 0;
  char *end;

  if(argc < 2){
    fprintf(2, "usage: kill PID...\n");
    return 2;
  }
  for(int i = 1; i < argc; i++){
    int pid = strtol(argv[i], &end, 10);
    if(end == argv[i] || *end != 0){
      fprintf(2, "kill: bad pid %s\n", argv[i]);
      status = 1;
    } else if(kill(pid) < 0){
      fprintf(2, "kill: no process %d\n", pid);
      status = 1;
    }
  }
  return status;
}
