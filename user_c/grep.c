// grep: print lines that match a pattern.
//
// usage: grep [-v] [-c] [-n] PATTERN [FILE...]
// Patterns are a small regular-expression language: c matches itself,
// '.' any character, 'x*' zero or more x, '^' and '$' anchor at the start
// and end of the line. Exit status 0 if a line was selected, 1 if none,
// 2 on an error (as POSIX grep).

#include "types.h"
#include "fcntl.h"
#include "user.h"

static int invert, countonly, numbers;

static int matchhere(const char *re, const char *text);

// x* at text: try the rest of the pattern after 0, 1, 2... copies of x.
static int
matchstar(int x, const char *re, const char *text)
{
  do {
    if(matchhere(re, text))
      return 1;
  } while(*text != 0 && (*text++ == x || x == '.'));
  return 0;
}

// Does re match a prefix of text?
static int
matchhere(const char *re, const char *text)
{
  if(re[0] == 0)
    return 1;
  if(re[1] == '*')
    return matchstar(re[0], re + 2, text);
  if(re[0] == '$' && re[1] == 0)
    return *text == 0;
  if(*text != 0 && (re[0] == '.' || re[0] == *text))
    return matchhere(re + 1, text + 1);
  return 0;
}

// Does re match anywhere in text?
static int
match(const char *re, const char *text)
{
  if(re[0] == '^')
    return matchhere(re + 1, text);
  do {
    if(matchhere(re, text))
      return 1;
  } while(*text++ != 0);
  return 0;
}

static char buf[4096];

// Prints line p when it is selected, with the file name and line number
// if asked, in one write.
static int
selectline(const char *re, const char *p, const char *name, int many,
           int lineno)
{
  char num[16] = "";

  if(match(re, p) == invert)
    return 0;
  if(!countonly){
    if(numbers)
      snprintf(num, sizeof(num), "%d:", lineno);
    printf("%s%s%s%s\n", many ? name : "", many ? ":" : "", num, p);
  }
  return 1;
}

// Greps one file; a line longer than the buffer is treated as several.
// Adds the number of selected lines to *nsel; returns -1 on a read error.
static int
grepfd(const char *re, int fd, const char *name, int many, int *nsel)
{
  int n, have = 0, rest, lineno = 0, count = 0;
  char *p, *nl;

  for(;;){
    n = read(fd, buf + have, sizeof(buf) - 1 - have);
    if(n < 0){
      fprintf(2, "grep: read error on %s\n", name);
      return -1;
    }
    have += n;
    buf[have] = 0;
    for(p = buf; (nl = strchr(p, '\n')) != 0; p = nl + 1){
      *nl = 0;
      count += selectline(re, p, name, many, ++lineno);
    }
    rest = buf + have - p;
    if(rest > 0 && (n == 0 || (p == buf && have == sizeof(buf) - 1))){
      // the last line has no newline, or it fills the whole buffer
      count += selectline(re, p, name, many, ++lineno);
      rest = 0;
    }
    if(n == 0)
      break;
    memmove(buf, p, rest);
    have = rest;
  }
  if(countonly)
    printf("%s%s%d\n", many ? name : "", many ? ":" : "", count);
  *nsel += count;
  return 0;
}

int
main(int argc, char *argv[])
{
  int i = 1, fd, nsel = 0, err = 0;

  for(; i < argc && argv[i][0] == '-' && argv[i][1] != 0; i++){
    for(char *f = argv[i] + 1; *f; f++){
      if(*f == 'v')
        invert = 1;
      else if(*f == 'c')
        countonly = 1;
      else if(*f == 'n')
        numbers = 1;
      else {
        fprintf(2, "grep: unknown option -%c\n", *f);
        return 2;
      }
    }
  }
  if(i >= argc){
    fprintf(2, "usage: grep [-v] [-c] [-n] PATTERN [FILE...]\n");
    return 2;
  }
  char *re = argv[i++];
  if(i >= argc)
    return grepfd(re, 0, "(standard input)", 0, &nsel) < 0 ? 2 : nsel == 0;
  int many = argc - i > 1;
  for(; i < argc; i++){
    if((fd = open(argv[i], O_RDONLY)) < 0){
      fprintf(2, "grep: cannot open %s\n", argv[i]);
      err = 1;
      continue;
    }
    if(grepfd(re, fd, argv[i], many, &nsel) < 0)
      err = 1;
    close(fd);
  }
  return err ? 2 : nsel == 0;
}
