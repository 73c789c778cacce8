// ps: list processes (from the procinfo system call), sorted by pid.
// Columns: PID, parent PID, state, hart (running or last ran on), user
// memory, program name.

#include "types.h"
#include "param.h"
#include "procinfo.h"
#include "user.h"

static const char *states[] = {
  [PS_UNUSED] "unused", [PS_USED] "embryo", [PS_SLEEPING] "sleep",
  [PS_RUNNABLE] "ready", [PS_RUNNING] "run", [PS_ZOMBIE] "zombie",
};

static struct procinfo rows[NPROC];

int
main(int argc, char *argv[])
{
  int n = procinfo(rows, NPROC);

  if(n < 0){
    fprintf(2, "ps: procinfo failed\n");
    return 1;
  }
  // insertion sort by pid
  for(int i = 1; i < n; i++){
    struct procinfo t = rows[i];
    int j = i;
    for(; j > 0 && rows[j - 1].pid > t.pid; j--)
      rows[j] = rows[j - 1];
    rows[j] = t;
  }
  printf("%5s %5s %-6s %4s %8s %s\n", "PID", "PPID", "STATE", "HART", "MEM", "NAME");
  for(int i = 0; i < n; i++){
    struct procinfo *p = &rows[i];
    const char *st = "?";
    if(p->state >= 0 && p->state < sizeof(states) / sizeof(states[0]))
      st = states[p->state];
    char hart[4] = "-";
    if(p->cpu >= 0 && p->cpu < 10){
      hart[0] = '0' + p->cpu;
      hart[1] = 0;
    }
    printf("%5d %5d %-6s %4s %7luK %s%s\n", p->pid, p->ppid, st, hart,
           p->sz / 1024, p->name, p->killed ? " (killed)" : "");
  }
  return 0;
}
