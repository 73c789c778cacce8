// procinfo.h: one row of the process table as procinfo() reports it (for ps).
// Shared with user programs.

#define PI_NAME 16

// procinfo.state values; proc.h's enum procstate is defined from these
#define PS_UNUSED   0   // free slot (never reported)
#define PS_USED     1   // being created
#define PS_SLEEPING 2   // blocked in sleep()
#define PS_RUNNABLE 3   // ready to run
#define PS_RUNNING  4   // on the CPU
#define PS_ZOMBIE   5   // exited, waiting for its parent's wait()

struct procinfo {
  int pid;
  int ppid;
  int state;            // enum procstate value (proc.h)
  int killed;
  uint64 sz;            // bytes of user memory
  uint64 cputicks;      // timer ticks spent running
  char name[PI_NAME];   // exec'd program name
  int cpu;              // hart it runs or last ran on, -1 if it never ran
};
