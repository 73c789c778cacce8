// echo: print the arguments, separated by spaces, then a newline
// (none with -n). One write() call, so concurrent echoes do not interleave.

#include "types.h"
#include "user.h"

int
main(int argc, char *argv[])
{
  int i = 1, newline = 1, len = 0;
  char *line;

  if(argc > 1 && strcmp(argv[1], "-n") == 0){
    newline = 0;
    i++;
  }
  for(int j = i; j < argc; j++)
    len += strlen(argv[j]) + 1;
  if((line = malloc(len + 1)) == 0){
    fprintf(2, "echo: out of memory\n");
    return 1;
  }
  len = 0;
  for(int j = i; j < argc; j++){
    if(j > i)
      line[len++] = ' ';
    strcpy(line + len, argv[j]);
    len += strlen(argv[j]);
  }
  if(newline)
    line[len++] = '\n';
  return write(1, line, len) != len;
}
