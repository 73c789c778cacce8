// param.h: kernel limits.

#define NPROC        64   // maximum number of processes
#define NCPU          8   // most harts (bootinfo.ncpu says how many run)
#define NOFILE       16   // open files per process
#define NFILE       128   // open files in the whole system
// In-memory inodes. Sized so that iget can never run out, whatever user programs
// do: every open file holds at most one (NFILE), and every process one for its
// cwd plus at most three while a system call walks a path (namex holds two,
// create/link a third). Smaller, and enough processes holding open files panic
// the kernel in iget (usertests allopen).
#define NINODE  (NFILE + 4 * NPROC)
#define NDEV         10   // device major numbers (device.h)
#define ROOTDEV       1   // device number of the root file system disk
#define MAXARG       32   // exec arguments
#define MAXPATH     128   // longest path name, including the NUL
#define NBUF         64   // disk block cache entries
#define USERSTACK    16   // user stack pages (a guard page sits below them)
#define USERSTACKNOW  4   // of which exec maps at once; the rest on first touch
#define KSTACKPAGES   2   // kernel stack pages per process (plus a guard)
#define PIPESIZE   2048   // bytes buffered in a pipe
#define TICK_HZ     100   // timer interrupts per second while anything runs
#define NEXITHOOK     4   // subsystem hooks run when a process exits
