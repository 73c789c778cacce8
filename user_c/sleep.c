// sleep: pause for a number of seconds (decimals allowed: sleep 0.25).

#include "types.h"
#include "param.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  char *p;
  long whole, frac = 0, scale = 1;

  if(argc != 2){
    fprintf(2, "usage: sleep SECONDS\n");
    return 2;
  }
  whole = strtol(argv[1], &p, 10);
  if(*p == '.'){
    for(p++; isdigit(*p) && scale < 1000000; p++){
      frac = frac * 10 + *p - '0';
      scale *= 10;
    }
  }
  if(p == argv[1] || *p != 0 || whole < 0 || argv[1][0] == '-'){
    fprintf(2, "sleep: bad time %s\n", argv[1]);
    return 2;
  }
  // round up to whole ticks so a short sleep is not no sleep
  long ticks = whole * TICK_HZ + (frac * TICK_HZ + scale - 1) / scale;
  if(sleep(ticks) < 0){
    fprintf(2, "sleep: interrupted\n");
    return 1;
  }
  return 0;
}
