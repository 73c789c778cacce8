// sleeplock.h: long-term lock; a waiter sleeps instead of spinning, so it
// may be held across disk I/O.

struct sleeplock {
  uint locked;          // 1 while held
  struct spinlock lk;   // protects this struct
  char *name;           // for debugging
  int pid;              // the holder
  int waiting;          // acquiresleep()s asleep: release wakes only then
                        // (a wakeup() scans the whole process table)
};
