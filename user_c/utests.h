// utests.h: what the usertests files share (usertests.c is the driver;
// ut_proc.c, ut_fs.c, ut_mem.c, ut_args.c and ut_ulib.c hold the tests).
//
// A test is `void name(char *s)`, run in its own child process with s =
// its name. It fails by calling fail(s, ...), which prints "s: message"
// and exits 1; returning (exit 0) is success.

// Include after types.h. The address-space facts come from kernel_c:
// PGSIZE (riscv.h), MAXVA and TRAMPOLINE (vmlayout.h: mapped, but not for
// user mode), KERNBASE (memlayout.h: kernel RAM, never user-accessible).
#include "riscv.h"
#include "param.h"
#include "memlayout.h"
#include "vmlayout.h"

struct test {
  void (*f)(char *);
  char *s;
};

// usertests.c
void fail(char *s, char *fmt, ...) __attribute__((noreturn,
  format(printf, 2, 3)));
int waitfor(char *s, int pid);
long rawsyscall(long num, long a0, long a1, long a2);
void writefile(char *s, char *path, char *data, int n);
int readfile(char *s, char *path, char *buf, int max);
extern char ubuf[8192];

// one table per file, each ending with {0, 0}
extern struct test proc_quick[], proc_slow[];
extern struct test fs_quick[], fs_slow[];
extern struct test mem_quick[], mem_slow[];
extern struct test args_quick[], args_slow[];
extern struct test ulib_quick[], ulib_slow[];
