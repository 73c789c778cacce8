// tok_host: user_c/bpe.c on the host, for tests/test_tokenizer_guest.py and
// harness/bench/tokenizer.py (built with tests/host_c/ushim standing in for
// the guest's types.h and user.h).
//
//   tok_host VOCAB encode  < text > ids      (uint32 little-endian each)
//   tok_host VOCAB decode  < ids  > bytes
//   tok_host VOCAB time N  < text            encodes the text N times and
//            prints "tokens=T bytes=B ns=NS" (the best of the N runs)

#include <time.h>
#include "types.h"
#include "bpe.h"

static uchar *
slurp(long *n)
{
  long cap = 1 << 20, len = 0;
  uchar *buf = malloc(cap);
  size_t got;

  while(buf && (got = fread(buf + len, 1, cap - len, stdin)) > 0){
    len += got;
    if(len == cap)
      buf = realloc(buf, cap *= 2);
  }
  *n = len;
  return buf;
}

static long
now_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int
main(int argc, char *argv[])
{
  struct bpe b;
  long n;

  if(argc < 3){
    fprintf(stderr, "usage: tok_host VOCAB encode|decode|time N\n");
    return 2;
  }
  if(bpe_load(&b, argv[1]) < 0){
    fprintf(stderr, "tok_host: %s: %s\n", argv[1], b.err);
    return 1;
  }
  uchar *in = slurp(&n);
  if(in == 0)
    return 1;
  if(strcmp(argv[2], "encode") == 0 || strcmp(argv[2], "time") == 0){
    uint32 *ids = malloc(4 * (n + 1));
    int reps = argc > 3 ? atoi(argv[3]) : 1, k = 0;
    long best = -1;
    for(int r = 0; r < reps || r == 0; r++){
      long t0 = now_ns();
      k = bpe_encode(&b, in, n, ids, n + 1);
      long dt = now_ns() - t0;
      if(best < 0 || dt < best)
        best = dt;
    }
    if(k < 0){
      fprintf(stderr, "tok_host: encode failed\n");
      return 1;
    }
    if(strcmp(argv[2], "time") == 0)
      printf("tokens=%d bytes=%ld ns=%ld\n", k, n, best);
    else
      fwrite(ids, 4, k, stdout);
    free(ids);
  } else if(strcmp(argv[2], "decode") == 0){
    int cap = n / 4 * 256 + 1;
    uchar *out = malloc(cap);
    int k = bpe_decode(&b, (uint32 *)in, n / 4, out, cap);
    if(k < 0){
      fprintf(stderr, "tok_host: bad id\n");
      return 1;
    }
    fwrite(out, 1, k, stdout);
    free(out);
  } else {
    fprintf(stderr, "tok_host: unknown command %s\n", argv[2]);
    return 2;
  }
  bpe_free(&b);
  free(in);
  return 0;
}
