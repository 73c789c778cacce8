// power.c: the power/reset device (harness/devices/power.py).
//
// One write ends the machine: POWER_PASS | (status << 16) is a normal
// power-off with an exit status (halt()), POWER_FAIL | (code << 16) reports
// a failure (panic() uses code 1).

#include "types.h"
#include "memlayout.h"
#include "riscv.h"
#include "defs.h"

void
poweroff(int kind, int status)
{
  *(volatile uint32*)POWER = kind | ((status & 0xffff) << 16);
  // the harness stops at the write; never run on if it did not
  intr_off();
  for(;;)
    wfi();
}
