// wc: count lines, words and bytes of files (or standard input).
// Prints "LINES WORDS BYTES [NAME]", and a total line for several files.

#include "types.h"
#include "fcntl.h"
#include "user.h"

static char buf[4096];

struct counts {
  uint64 lines, words, bytes;
};

static int
count(int fd, const char *name, struct counts *c)
{
  int n, inword = 0;

  c->lines = c->words = c->bytes = 0;
  while((n = read(fd, buf, sizeof(buf))) > 0){
    c->bytes += n;
    for(int i = 0; i < n; i++){
      if(buf[i] == '\n')
        c->lines++;
      if(isspace(buf[i])){
        inword = 0;
      } else if(!inword){
        c->words++;
        inword = 1;
      }
    }
  }
  if(n < 0){
    fprintf(2, "wc: read error on %s\n", name);
    return -1;
  }
  return 0;
}

static void
report(struct counts *c, const char *name)
{
  printf("%lu %lu %lu%s%s\n", c->lines, c->words, c->bytes,
         name ? " " : "", name ? name : "");
}

int
main(int argc, char *argv[])
{
  struct counts c, total = {0, 0, 0};
  int fd, status = 0;

  if(argc <= 1){
    if(count(0, "standard input", &c) < 0)
      return 1;
    report(&c, 0);
    return 0;
  }
  for(int i = 1; i < argc; i++){
    if((fd = open(argv[i], O_RDONLY)) < 0){
      fprintf(2, "wc: cannot open %s\n", argv[i]);
      status = 1;
      continue;
    }
    if(count(fd, argv[i], &c) < 0){
      status = 1;
    } else {
      report(&c, argv[i]);
      total.lines += c.lines;
      total.words += c.words;
      total.bytes += c.bytes;
    }
    close(fd);
  }
  if(argc > 2)
    report(&total, "total");
  return status;
}
