// tok: the guest's tokenizer on the command line (user_c/bpe.c over the
// vocabulary file of the AI device's model, see tokmodel.c).
//
//   tok [-f VOCAB] [-e] [-t] encode [TEXT ...]   ids, one line
//   tok [-f VOCAB] [-t] decode [ID ...]          the text, as raw bytes
//
// Without TEXT or IDs the input is read from stdin (all of it). TEXT words
// are joined by single spaces; -e turns the escapes \n \r \t \\ in them
// into their characters (the shell passes no newlines). Special tokens such
// as <|im_start|> in the text become their ids. -t adds one line on fd 2:
// "tok: N tokens B bytes U us load L us" (the guest's encode or decode
// time, and the vocabulary's load time; decode has no "B bytes").

#include "types.h"
#include "user.h"
#include "bpe.h"
#include "tokmodel.h"

static void
usage(void)
{
  fprintf(2, "usage: tok [-f VOCAB] [-e] [-t] encode [TEXT ...]\n"
             "       tok [-f VOCAB] [-t] decode [ID ...]\n"
             "no TEXT or IDs: read stdin; -e: \\n \\r \\t \\\\ escapes in TEXT;\n"
             "-t: time it; VOCAB defaults to the AI model's (" TOK_SMOL_VOCAB
             ", " TOK_QWEN_VOCAB ")\n");
  exit(1);
}

// All of stdin, NUL-terminated; its length in *n.
static char *
read_all(int *n)
{
  int cap = 4096, len = 0, got;
  char *buf = malloc(cap);

  while(buf && (got = read(0, buf + len, cap - len - 1)) > 0){
    len += got;
    if(len == cap - 1){
      char *bigger = malloc(cap * 2);
      if(bigger)
        memmove(bigger, buf, len);
      free(buf);
      buf = bigger;
      cap *= 2;
    }
  }
  if(buf == 0){
    fprintf(2, "tok: out of memory reading stdin\n");
    exit(1);
  }
  buf[len] = 0;
  *n = len;
  return buf;
}

// argv words joined by spaces, escapes resolved when esc
static char *
join(char **w, int nw, int esc, int *n)
{
  int cap = 1, k = 0;

  for(int i = 0; i < nw; i++)
    cap += strlen(w[i]) + 1;
  char *s = malloc(cap);
  if(s == 0){
    fprintf(2, "tok: out of memory\n");
    exit(1);
  }
  for(int i = 0; i < nw; i++){
    if(i > 0)
      s[k++] = ' ';
    for(char *p = w[i]; *p; p++){
      if(esc && p[0] == '\\' && p[1] && strchr("nrt\\", p[1])){
        p++;
        s[k++] = *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p == 't' ? '\t' : '\\';
      } else {
        s[k++] = *p;
      }
    }
  }
  s[k] = 0;
  *n = k;
  return s;
}

static uint64 load_us;          // -t: the vocabulary's load time

static int
encode(struct bpe *b, const char *text, int len, int timed)
{
  int cap = len + 1;          // never more ids than bytes
  uint32 *ids = malloc(4 * cap);
  char *line = malloc(11 * cap + 2);

  if(ids == 0 || line == 0){
    fprintf(2, "tok: out of memory for %d ids\n", cap);
    return 1;
  }
  uint64 t0 = time_us();
  int n = bpe_encode(b, (const uchar *)text, len, ids, cap);
  uint64 dt = time_us() - t0;
  if(n < 0){
    fprintf(2, "tok: encode failed (out of memory)\n");
    return 1;
  }
  int k = ai_format_ids(line, 11 * cap, ids, n);
  line[k++] = '\n';
  write(1, line, k);
  if(timed)
    fprintf(2, "tok: %d tokens %d bytes %lu us load %lu us\n", n, len, dt,
            load_us);
  return 0;
}

// whitespace-separated ids in s -> ids; count, or -1 after saying why
static int
parse_ids(char *s, uint32 *ids, int cap)
{
  int n = 0;

  for(;;){
    while(isspace(*s))
      s++;
    if(*s == 0)
      return n;
    char *w = s;
    while(*s && !isspace(*s))
      s++;
    char c = *s;
    *s = 0;
    if(n >= cap || ai_parse_u32(w, &ids[n]) < 0){
      fprintf(2, "tok: invalid token id %s\n", w);
      return -1;
    }
    n++;
    *s = c;
  }
}

static int
decode(struct bpe *b, char *text, int len, int timed)
{
  uint32 *ids = malloc(4 * (len / 2 + 1));   // an id and a separator: >= 2 bytes

  if(ids == 0){
    fprintf(2, "tok: out of memory\n");
    return 1;
  }
  int n = parse_ids(text, ids, len / 2 + 1);
  if(n < 0)
    return 1;
  for(int i = 0; i < n; i++){
    if(ids[i] >= b->nrows){
      fprintf(2, "tok: token id %u out of range (the vocabulary has %u)\n",
              ids[i], b->nrows);
      return 1;
    }
  }
  uint64 t0 = time_us();
  if(tok_write_text(b, 1, ids, n) < 0){
    fprintf(2, "tok: write failed\n");
    return 1;
  }
  if(timed)
    fprintf(2, "tok: %d tokens %lu us load %lu us\n", n, time_us() - t0,
            load_us);
  return 0;
}

int
main(int argc, char *argv[])
{
  static struct bpe b;
  char *vocab = 0, *text;
  int esc = 0, timed = 0, i, len;

  for(i = 1; i < argc && argv[i][0] == '-'; i++){
    if(strcmp(argv[i], "-f") == 0 && i + 1 < argc)
      vocab = argv[++i];
    else if(strcmp(argv[i], "-e") == 0)
      esc = 1;
    else if(strcmp(argv[i], "-t") == 0)
      timed = 1;
    else
      usage();
  }
  if(i >= argc || (strcmp(argv[i], "encode") != 0 &&
                   strcmp(argv[i], "decode") != 0))
    usage();
  int enc = strcmp(argv[i], "encode") == 0;
  i++;
  text = i < argc ? join(argv + i, argc - i, esc, &len) : read_all(&len);
  uint64 t0 = time_us();
  if(tok_load(&b, vocab, "tok") < 0)
    exit(1);
  load_us = time_us() - t0;
  exit(enc ? encode(&b, text, len, timed) : decode(&b, text, len, timed));
}
