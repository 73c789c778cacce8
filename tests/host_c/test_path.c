// test_path.c: kernel_c/path.c (skipelem, namecmp) on the host, against a
// reference split, with every buffer exactly as large as it must be so that
// AddressSanitizer sees a read past a path's NUL or a write past name[].

#include "hostk.h"
#include "riscv.h"
#include "fs.h"
#include "defs.h"

// a malloc'd copy of s, exactly strlen(s) + 1 bytes
static char*
dup(const char *s)
{
  int n = k_strlen(s);
  char *d = malloc(n + 1);

  k_memmove(d, s, n + 1);
  return d;
}

// Walk path with skipelem into names[][DIRSIZ]; the element count.
static int
walk_path(const char *path, char names[][DIRSIZ + 1], int max)
{
  char *p = dup(path), *q = p;
  char *name = malloc(DIRSIZ);     // exactly DIRSIZ: the kernel's buffers
  int n = 0;

  while((q = skipelem(q, name)) != 0){
    CHECK(n < max, "too many elements in '%s'", path);
    if(n >= max)
      break;
    k_memset(names[n], 0, DIRSIZ + 1);
    for(int i = 0; i < DIRSIZ && name[i]; i++)   // the bytes up to a NUL count
      names[n][i] = name[i];
    n++;
    CHECK(*q != '/', "'%s': the rest starts with a slash", path);
  }
  free(name);
  free(p);
  return n;
}

// The reference: non-empty elements between slashes, cut to DIRSIZ bytes.
static int
split(const char *path, char names[][DIRSIZ + 1], int max)
{
  int n = 0, len;
  const char *s;

  while(*path){
    while(*path == '/')
      path++;
    if(!*path)
      break;
    s = path;
    while(*path && *path != '/')
      path++;
    len = path - s;
    if(n < max){
      k_memset(names[n], 0, DIRSIZ + 1);
      k_memmove(names[n], s, len < DIRSIZ ? len : DIRSIZ);
    }
    n++;
  }
  return n;
}

static void
expect(const char *path, int want_n, const char *first, const char *rest)
{
  char *p = dup(path), *name = malloc(DIRSIZ), *r;
  char got[DIRSIZ + 1];

  r = skipelem(p, name);
  if(want_n == 0){
    CHECK(r == 0, "skipelem('%s') should be 0", path);
  } else {
    CHECK(r != 0, "skipelem('%s') = 0", path);
    if(r){
      k_memset(got, 0, sizeof(got));
      k_memmove(got, name, DIRSIZ);
      CHECK(k_strncmp(got, first, DIRSIZ) == 0, "'%s': name '%s' want '%s'", path, got, first);
      CHECK(k_strncmp(r, rest, 1000) == 0, "'%s': rest '%s' want '%s'", path, r, rest);
    }
  }
  free(name);
  free(p);
}

int
main(void)
{
  char a[64][DIRSIZ + 1], b[64][DIRSIZ + 1];
  char path[200];
  static const char alphabet[] = "//ab.c";

  // the examples of the contract
  expect("a/bb/c", 1, "a", "bb/c");
  expect("///a//bb", 1, "a", "bb");
  expect("", 0, 0, 0);
  expect("////", 0, 0, 0);
  expect("a", 1, "a", "");
  expect("a///", 1, "a", "");
  expect(".", 1, ".", "");
  expect("../x", 1, "..", "x");
  // an element of exactly DIRSIZ bytes, and longer ones (cut, no NUL)
  expect("abcdefghijklmn/x", 1, "abcdefghijklmn", "x");
  expect("abcdefghijklmnopqrstuvwxyz/y", 1, "abcdefghijklmn", "y");
  expect("abcdefghijklm", 1, "abcdefghijklm", "");

  // namecmp compares DIRSIZ bytes, with or without a NUL
  char *n1 = malloc(DIRSIZ), *n2 = malloc(DIRSIZ);
  k_memmove(n1, "abcdefghijklmn", DIRSIZ);
  k_memmove(n2, "abcdefghijklmn", DIRSIZ);
  CHECK(namecmp(n1, n2) == 0, "equal DIRSIZ names");
  n2[DIRSIZ - 1] = 'x';
  CHECK(namecmp(n1, n2) != 0, "names differing in the last byte");
  free(n1);
  free(n2);
  CHECK(namecmp("a", "a") == 0, "short names");
  CHECK(namecmp("a", "ab") != 0, "prefix");

  // random paths against the reference split
  hk_seed(1);
  for(int t = 0; t < 200000; t++){
    int len = hk_rand() % 80;
    for(int i = 0; i < len; i++){
      // long runs of letters now and then: elements longer than DIRSIZ
      path[i] = hk_rand() % 8 == 0 ? '/' : alphabet[2 + hk_rand() % 4];
      if(hk_rand() % 3 == 0)
        path[i] = alphabet[hk_rand() % 6];
    }
    path[len] = 0;
    int n = walk_path(path, a, 64), m = split(path, b, 64);
    CHECK(n == m, "'%s': %d elements, want %d", path, n, m);
    for(int i = 0; i < n && i < m; i++)
      CHECK(k_memcmp(a[i], b[i], DIRSIZ + 1) == 0, "'%s' element %d: '%s' want '%s'",
            path, i, a[i], b[i]);
  }
  return hk_done("path");
}
