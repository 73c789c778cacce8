// hostk.h: what the host-side tests of kernel code share (built by
// tests/test_reliability_hostunits.py with AddressSanitizer and UBSan).
//
// The kernel's own string.c is linked in; its names are renamed on the
// command line (-Dmemset=k_memset ...) so they never meet libc's, and the
// tests include no libc string header for the same reason. Every check
// failure prints "FAIL file:line: what" and the program exits 1 at the end;
// success prints "OK <name> <checks>".

#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>

#include "types.h"

static int hk_checks, hk_fails;

#define CHECK(cond, ...) do { \
    hk_checks++; \
    if(!(cond)){ \
      hk_fails++; \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__); \
      printf("\n"); \
    } \
  } while(0)

static __attribute__((unused)) int
hk_done(const char *name)
{
  if(hk_fails){
    printf("%s: %d of %d checks failed\n", name, hk_fails, hk_checks);
    return 1;
  }
  printf("OK %s %d\n", name, hk_checks);
  return 0;
}

// xorshift64*: the tests' deterministic random numbers
static uint64 hk_state = 0x9E3779B97F4A7C15UL;

static __attribute__((unused)) uint64
hk_rand(void)
{
  hk_state ^= hk_state >> 12;
  hk_state ^= hk_state << 25;
  hk_state ^= hk_state >> 27;
  return hk_state * 2685821657736338717UL;
}

static __attribute__((unused)) void
hk_seed(uint64 s)
{
  hk_state = s * 0x9E3779B97F4A7C15UL + 1;
  hk_rand();
}

// panic() in the code under test comes back here when a test expects it
static jmp_buf hk_panic_jmp;
static int hk_panic_armed;
static char hk_panic_msg[256];

void
panic(const char *fmt, ...)
{
  __builtin_va_list ap;

  __builtin_va_start(ap, fmt);
  vsnprintf(hk_panic_msg, sizeof(hk_panic_msg), fmt, ap);
  __builtin_va_end(ap);
  if(hk_panic_armed){
    hk_panic_armed = 0;
    longjmp(hk_panic_jmp, 1);
  }
  printf("FAIL unexpected panic: %s\n", hk_panic_msg);
  exit(1);
}

// EXPECT_PANIC(stmt): stmt must panic
#define EXPECT_PANIC(stmt) do { \
    hk_checks++; \
    hk_panic_msg[0] = 0; \
    if(setjmp(hk_panic_jmp) == 0){ \
      hk_panic_armed = 1; \
      stmt; \
      hk_panic_armed = 0; \
      hk_fails++; \
      printf("FAIL %s:%d: %s did not panic\n", __FILE__, __LINE__, #stmt); \
    } \
  } while(0)
