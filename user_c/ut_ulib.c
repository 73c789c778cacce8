// ut_ulib.c: usertests for the user library itself (printf formatting,
// number parsing, strings, malloc), which llmrun and aibench build on.

#include "types.h"
#include "user.h"
#include "utests.h"

// Formats with snprintf and compares with want.
static void
check(char *s, char *want, char *got)
{
  if(strcmp(want, got) != 0)
    fail(s, "got '%s', want '%s'", got, want);
}

// every conversion, flag, width and precision printf supports
static void
printfmt(char *s)
{
  char b[128];

  snprintf(b, sizeof(b), "%d|%i|%u|%x|%X|%c|%s|%%", -42, 7, 4000000000u, 255,
           255, 'z', "str");
  check(s, "-42|7|4000000000|ff|FF|z|str|%", b);
  snprintf(b, sizeof(b), "%ld|%lu|%lx|%lld|%zu", -9000000000L,
           18446744073709551615UL, 0x123456789abcUL, -1LL, (uint64)3);
  check(s, "-9000000000|18446744073709551615|123456789abc|-1|3", b);
  snprintf(b, sizeof(b), "[%5d][%-5d][%05d][%05d][%5s][%-5s][%.2s][%3c]",
           42, 42, 42, -42, "ab", "ab", "abcdef", 'q');
  check(s, "[   42][42   ][00042][-0042][   ab][ab   ][ab][  q]", b);
  snprintf(b, sizeof(b), "[%*d][%-*d][%.*s][%8.3d][%p][%s]", 4, 7, 4, 7, 3,
           "abcdef", 5, (void *)0x1234, (char *)0);
  check(s, "[   7][7   ][abc][     005][0x1234][(null)]", b);
  snprintf(b, sizeof(b), "%d %d %u", -2147483647 - 1, 0, 0);
  check(s, "-2147483648 0 0", b);
  // truncation: the result is the full length, the buffer ends in a NUL
  if(snprintf(b, 6, "hello %s", "world") != 11 || strcmp(b, "hello") != 0)
    fail(s, "truncated snprintf gave '%s'", b);
  if(snprintf(b, 0, "abc") != 3)
    fail(s, "snprintf(b, 0, ...) miscounted");
}

// strtol/atoi and the string functions
static void
strings(char *s)
{
  char b[32], *end;

  if(atoi("-17") != -17 || atoi("  42x") != 42 || atoi("x") != 0)
    fail(s, "atoi");
  if(strtol("0x1F", &end, 0) != 31 || *end != 0 || strtol("-010", 0, 0) != -8
     || strtol("z", &end, 36) != 35 || strtol("12", 0, 3) != 5)
    fail(s, "strtol");
  if(strtol("abc", &end, 10) != 0 || strcmp(end, "abc") != 0)
    fail(s, "strtol without digits must leave end at the start");
  if(strcmp("abc", "abd") >= 0 || strcmp("b", "a") <= 0 || strcmp("", "") ||
     strncmp("abcx", "abcy", 3) || strlen("hello") != 5)
    fail(s, "strcmp/strncmp/strlen");
  strcpy(b, "abcdefgh");
  memmove(b + 2, b, 5);
  check(s, "ababcdeh", b);
  strcpy(b, "abcdefgh");
  memmove(b, b + 3, 5);
  check(s, "defghfgh", b);
  strcpy(b, "ab");
  strcat(b, "cd");
  check(s, "abcd", b);
  char *h = "hello";
  if(strchr(h, 'l') != h + 2 || strchr(h, 'z') != 0 || strchr(h, 0) != h + 5)
    fail(s, "strchr");
  if(strcmp(strrchr("hello", 'l'), "lo") || strcmp(strstr("a bcd", "bc"), "bcd")
     || strstr("abc", "x") != 0)
    fail(s, "strrchr/strstr");
  if(memcmp("ab", "ac", 2) >= 0 || memcmp("ab", "ab", 2) != 0)
    fail(s, "memcmp");
}

// many blocks of many sizes, freed in a scrambled order, merge back:
// afterwards one big block fits where they were
static void
mallocmix(char *s)
{
  static char *blocks[300];
  char *brk0, *big;

  brk0 = sbrk(0);
  for(int round = 0; round < 3; round++){
    for(int i = 0; i < 300; i++){
      int n = (i * 37) % 700 + 1;
      if((blocks[i] = malloc(n)) == 0)
        fail(s, "malloc(%d) failed", n);
      memset(blocks[i], i, n);
    }
    for(int i = 0; i < 300; i++){
      int j = (i * 7) % 300;   // 7 and 300 are coprime: a permutation
      int n = (j * 37) % 700 + 1;
      for(int k = 0; k < n; k++)
        if(blocks[j][k] != (char)j)
          fail(s, "block %d overwritten", j);
      free(blocks[j]);
    }
  }
  // everything merged: half the heap comes back in one piece, no sbrk
  uint64 grown = sbrk(0) - brk0;
  if((big = malloc(grown / 2)) == 0)
    fail(s, "malloc of half the heap failed");
  if(sbrk(0) - brk0 != grown)
    fail(s, "free blocks did not merge (heap grew again)");
  free(big);
  char *p = malloc(10), *q;
  strcpy(p, "realloc");
  if((q = realloc(p, 5000)) == 0 || strcmp(q, "realloc") != 0)
    fail(s, "realloc lost the data");
  free(q);
  if((p = calloc(100, 10)) == 0)
    fail(s, "calloc failed");
  for(int i = 0; i < 1000; i++)
    if(p[i] != 0)
      fail(s, "calloc memory not zero");
  free(p);
}

// blocks freed downwards, then upwards (free's walk starts at the rover:
// umalloc.c), with sizes that leave a small leftover in every sbrk chunk:
// every order merges back into one piece
static void
mallocorder(char *s)
{
  static char *blocks[600];
  char *brk0 = sbrk(0), *big;

  for(int dir = 0; dir < 2; dir++){
    for(int i = 0; i < 600; i++){
      if((blocks[i] = malloc(10001)) == 0)
        fail(s, "malloc(10001) failed");
      memset(blocks[i], i, 10001);
    }
    for(int i = 0; i < 600; i++){
      int j = dir == 0 ? 599 - i : i;
      if(blocks[j][0] != (char)j || blocks[j][10000] != (char)j)
        fail(s, "block %d overwritten", j);
      free(blocks[j]);
    }
    uint64 grown = sbrk(0) - brk0;
    if((big = malloc(grown - 4096)) == 0)
      fail(s, "freed %s, the heap did not merge into one block",
           dir == 0 ? "downwards" : "upwards");
    if(sbrk(0) - brk0 != grown)
      fail(s, "freed %s, the heap grew again", dir == 0 ? "downwards" : "upwards");
    free(big);
  }
}

struct test ulib_quick[] = {
  { printfmt, "printf" },
  { strings, "strings" },
  { mallocmix, "mallocmix" },
  { mallocorder, "mallocorder" },
  { 0, 0 },
};

struct test ulib_slow[] = {
  { 0, 0 },
};
