// spinlock.h: mutual-exclusion lock that spins; holding one keeps
// interrupts off on this hart.

struct spinlock {
  uint locked;          // 1 while held
  char *name;           // for debugging
  struct cpu *cpu;      // the holder
};
