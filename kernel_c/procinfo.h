// procinfo.h: one row of the process table as procinfo() reports it (for ps).
// Shared with user programs.

#define PI_NAME 16

struct procinfo {
  int pid;
  int ppid;
  int state;            // enum procstate value (proc.h)
  int killed;
  uint64 sz;            // bytes of user memory
  uint64 cputicks;      // timer ticks spent running
  char name[PI_NAME];   // exec'd program name
};
