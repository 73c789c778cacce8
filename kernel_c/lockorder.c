// lockorder.c: lock orders the lock checker (harness race; harness/race/lockdep.py)
// is told are not deadlocks, each with the reason. The checker knows a lock by its
// class (its initlock name), so it cannot tell one process's lock from another's: an
// order listed here involves a lock no other hart can be waiting for at the time.
// The harness reads this table by its symbol; the kernel never uses it.

struct lockorder_ok {
  const char *first;   // held ...
  const char *then;    // ... while this one is taken
  const char *why;
};

const struct lockorder_ok lockorder_ok[] = {
  // fork() fills in the child (allocproc() returns it locked) before any other hart
  // can see it: the child is not RUNNABLE and has no parent yet, so nobody waits for
  // its lock while it takes the inode table's, the file table's or kmem's.
  { "proc", "itable", "fork: the new child's lock, unreachable by other harts" },
  { "proc", "ftable", "fork: the new child's lock, unreachable by other harts" },
  { "proc", "kmem", "fork: the new child's lock, unreachable by other harts" },
  { 0, 0, 0 },
};
