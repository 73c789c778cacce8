// xv6ut: xv6-riscv's own usertests, driven test by test and past failures,
// for `harness bench qemu`. The bench copies this file next to the
// checkout's user/usertests.c and builds it for both machines, against
// xv6's user library and against ours (through the include shim).
//
//   xv6ut NAME...   run these tests of usertests.c's quicktests[] and
//                   slowtests[] in order, each in its own child (xv6's
//                   run()), until one fails: then print "@@ stop" and exit
//                   1, so that the bench boots a fresh machine (and disk)
//                   for the tests after it (a failed test leaves its files
//                   behind, e.g. a disk full of writebig's)
//
// usertests.c's own main() is renamed out of the way: it stops at the first
// failure and counts free pages by filling memory before and after (seconds
// per run on QEMU), which would dwarf a one-test run. Every test is bracketed
// by "@@ begin test NAME" and "@@ end test NAME ok|fail" for the host's
// clock; the run ends with "@@ exit".

#define main usertests_main
#include "usertests.c"
#undef main

static struct test *
find(char *name)
{
  for(struct test *t = quicktests; t->s != 0; t++)
    if(strcmp(t->s, name) == 0)
      return t;
  for(struct test *t = slowtests; t->s != 0; t++)
    if(strcmp(t->s, name) == 0)
      return t;
  return 0;
}

int
main(int argc, char *argv[])
{
  for(int i = 1; i < argc; i++){
    struct test *t = find(argv[i]);
    if(t == 0){
      printf("@@ unknown test %s\n@@ stop\n", argv[i]);
      exit(1);
    }
    printf("@@ begin test %s\n", t->s);
    int ok = run(t->f, t->s);
    printf("@@ end test %s %s\n", t->s, ok ? "ok" : "fail");
    if(!ok){
      printf("@@ stop\n");
      exit(1);
    }
  }
  printf("@@ exit\n");
  exit(0);
}
