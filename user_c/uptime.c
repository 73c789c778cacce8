// uptime: time since boot, in seconds (time_us) and timer ticks (uptime).

#include "types.h"
#include "param.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  uint64 us = time_us();
  int ticks = uptime();

  printf("up %lu.%02lu s (%d ticks at %d Hz)\n", us / 1000000,
         us / 10000 % 100, ticks, TICK_HZ);
  return 0;
}
