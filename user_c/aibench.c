// aibench: load on the AI service from concurrent client processes.
//
//   aibench [-c CLIENTS] [-n REQUESTS] [-p PROMPTLEN] [-g PREDICT] [-q]
//
// Runs one reference request, then forks CLIENTS processes (default 4,
// at most 32) that each submit REQUESTS requests (default 4) one after the
// other: PROMPTLEN prompt tokens (default 8; the ids of /prompt.txt's
// pattern, modulo the vocabulary) and PREDICT generated tokens (default
// 16). Every result must equal the reference's (greedy decoding: one
// prompt, one answer). The clients send one 64-byte record per request to
// the parent over a shared pipe, and the parent alone prints. Records stay
// whole: every write and read is exactly one record and the pipe's buffer
// is a multiple of it, so a write never finds room for part of one (a
// magic number checks this).
//
// Output (stdout; one record per line, `key=value` fields, -q drops the
// per-request lines):
//   aibench: model="NAME" synthetic=0|1 clients=C requests=N prompt=P predict=G
//   reference: <the generated ids every request must reproduce>
//   req client=C i=I reqid=R ok=1|0 err=E gen=N queue_us=Q ttft_us=T
//       tpot_us=T e2e_us=E submit=T0            (one line per request)
//   total: requests=N ok=N failed=N tokens=N wall_us=W req_per_s=X.Y
//       tok_per_s=X.Y
//   ttft_us: mean=.. median=.. p99=.. min=.. max=..   (also tpot_us,
//       e2e_us, queue_us: dispatch - submit)
//   stats: free=.. queued=.. running=.. done=.. failed=.. orphans=..
//       workers=.. submitted=+N completed=+N failed=+N
//   aibench: PASS | aibench: FAIL (why)
// TTFT = t_first - t_submit, TPOT = (t_done - t_first) / (gen - 1),
// E2E = time_us() after the wait - t_submit (as llmrun --timing).
// Exit status 0 only if every request succeeded with the reference result
// and no request slot is left in use afterwards.

#include "types.h"
#include "virtio_ai.h"
#include "user.h"

#define MAXCLIENTS  32
#define MAXREQ      256
#define RECMAGIC    0x41495242    // "AIRB"

struct rec {
  uint32 magic;
  short client, i;
  int reqid;
  short ok, err;
  int gen;
  uint64 submit, dispatch, first, done, waited;
};
_Static_assert(sizeof(struct rec) == 64, "a record is 64 bytes");

static int nclients = 4, nreq = 4, plen = 8, predict = 16, quiet;
static uint32 prompt[AI_MAX_TOKENS];
static char *refresult;
static int rescap;
static struct ai_info info;

static void
die(const char *fmt, ...)
{
  char msg[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(2, "aibench: %s\n", msg);
  exit(2);
}

static void
usage(void)
{
  fprintf(2, "usage: aibench [-c CLIENTS] [-n REQUESTS] [-p PROMPTLEN] "
             "[-g PREDICT] [-q]\n"
             "  -c  concurrent client processes (1..%d, default 4)\n"
             "  -n  requests per client, one after the other (default 4)\n"
             "  -p  prompt tokens (1..%d, default 8)\n"
             "  -g  tokens to generate per request (default 16)\n"
             "  -q  totals only (no per-request lines)\n",
          MAXCLIENTS, AI_MAX_TOKENS);
  exit(2);
}

// One request; fills r. The result must equal `ref` (0: no check).
static void
one(struct rec *r, char *out, const char *ref)
{
  struct ai_status st;

  memset(&st, 0, sizeof(st));
  r->ok = 0;
  r->reqid = ai_submit(prompt, plen, predict);
  if(r->reqid < 0){
    r->err = ai_lasterr();
    r->waited = time_us();
    return;
  }
  int len = ai_wait_status(r->reqid, out, rescap, &st);
  r->waited = time_us();
  r->err = len < 0 ? ai_lasterr() : 0;
  r->gen = st.ngenerated;
  r->submit = st.t_submit;
  r->dispatch = st.t_dispatch;
  r->first = st.t_first;
  r->done = st.t_done;
  r->ok = len >= 0 && (ref == 0 || strcmp(out, ref) == 0);
}

static void
client(int c, int fd)
{
  struct rec r;
  char *out = malloc(rescap);

  for(int i = 0; i < nreq; i++){
    memset(&r, 0, sizeof(r));
    r.magic = RECMAGIC;
    r.client = c;
    r.i = i;
    one(&r, out, refresult);
    if(write(fd, &r, sizeof(r)) != sizeof(r))
      exit(1);
  }
  exit(0);
}

// ------------------------------------------------------------------ totals

static void
sort(uint64 *v, int n)
{
  for(int i = 1; i < n; i++){
    uint64 t = v[i];
    int j = i;
    for(; j > 0 && v[j - 1] > t; j--)
      v[j] = v[j - 1];
    v[j] = t;
  }
}

static void
summary(const char *name, uint64 *v, int n)
{
  uint64 sum = 0;

  if(n == 0){
    printf("%s: n=0\n", name);
    return;
  }
  sort(v, n);
  for(int i = 0; i < n; i++)
    sum += v[i];
  // median: the mean of the middle two for even n; p99: nearest rank
  uint64 med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  int r99 = (99 * n + 99) / 100;
  printf("%s: mean=%lu median=%lu p99=%lu min=%lu max=%lu\n", name, sum / n,
         med, v[r99 - 1], v[0], v[n - 1]);
}

// x.y of a/b
static void
ratio(char *buf, int cap, uint64 a, uint64 b)
{
  uint64 tenths = b ? (a * 10 + b / 2) / b : 0;
  snprintf(buf, cap, "%lu.%lu", tenths / 10, tenths % 10);
}

int
main(int argc, char *argv[])
{
  struct rec *recs;
  uint64 *ttft, *tpot, *e2e, *queue;
  struct ai_stats s0, s1;
  int p[2];

  for(int i = 1; i < argc; i++){
    char *a = argv[i];
    if(strcmp(a, "-q") == 0){
      quiet = 1;
      continue;
    }
    if(a[0] != '-' || a[1] == 0 || a[2] != 0 || i + 1 >= argc)
      usage();
    int v = atoi(argv[++i]);
    switch(a[1]){
    case 'c': nclients = v; break;
    case 'n': nreq = v; break;
    case 'p': plen = v; break;
    case 'g': predict = v; break;
    default: usage();
    }
  }
  if(nclients < 1 || nclients > MAXCLIENTS)
    die("-c wants 1..%d clients", MAXCLIENTS);
  if(nreq < 1 || nreq > MAXREQ)
    die("-n wants 1..%d requests", MAXREQ);
  if(plen < 1 || plen > AI_MAX_TOKENS)
    die("-p wants 1..%d tokens", AI_MAX_TOKENS);
  if(predict < 1 || predict > AI_MAX_PREDICT)
    die("-g wants 1..%d tokens", AI_MAX_PREDICT);
  if(ai_info(&info) < 0 || !info.present || info.state != AI_DEV_READY)
    die("no AI device with a ready model (boot with: harness run --model "
        "smol)");
  if(plen + predict > info.max_context)
    die("-p + -g = %d exceeds the model's context %d", plen + predict,
        info.max_context);

  // the course's prompt.txt pattern, kept inside the vocabulary
  static const uint32 pattern[] = { 1, 42, 314, 2718, 7, 99, 1234, 2048 };
  for(int i = 0; i < plen; i++)
    prompt[i] = pattern[i % 8] % info.vocab_size;
  rescap = predict * 11 + 16;
  refresult = malloc(rescap);
  if(refresult == 0)
    die("out of memory");

  printf("aibench: model=\"%s\" synthetic=%d clients=%d requests=%d prompt=%d "
         "predict=%d\n", info.name, (info.flags & AI_CFG_SYNTHETIC) != 0,
         nclients, nreq, plen, predict);
  if(ai_stats(&s0) < 0)
    die("ai_stats failed");

  // the reference result (also warms the service up)
  struct rec ref;
  one(&ref, refresult, 0);
  if(!ref.ok)
    die("the reference request failed: %s", ai_strerror(ref.err));
  printf("reference: %s\n", refresult);

  if(pipe(p) < 0)
    die("pipe failed");
  uint64 t0 = time_us();
  for(int c = 0; c < nclients; c++){
    int pid = fork();
    if(pid < 0)
      die("fork failed");
    if(pid == 0){
      close(p[0]);
      client(c, p[1]);
    }
  }
  close(p[1]);

  // allocated after the forks: the clients need none of it
  int total = nclients * nreq;
  recs = malloc(total * sizeof(struct rec));
  ttft = malloc(4 * total * sizeof(uint64));
  if(recs == 0 || ttft == 0)
    die("out of memory");
  tpot = ttft + total;
  e2e = tpot + total;
  queue = e2e + total;

  // records arrive as requests finish; EOF once every client has exited
  int nrec = 0;
  while(nrec < nclients * nreq &&
        read(p[0], &recs[nrec], sizeof(struct rec)) == sizeof(struct rec)){
    if(recs[nrec].magic != RECMAGIC)
      die("a record arrived torn");
    nrec++;
  }
  close(p[0]);
  for(int c = 0; c < nclients; c++)
    wait(0);
  uint64 wall = time_us() - t0;
  if(nrec < nclients * nreq)
    printf("aibench: %d records missing (a client died)\n",
           nclients * nreq - nrec);

  int ok = 0, ntt = 0, ntp = 0;
  uint64 tokens = 0;
  for(int k = 0; k < nrec; k++){
    struct rec *r = &recs[k];
    long tp = -1;
    if(r->gen > 1)
      tp = (r->done - r->first) / (r->gen - 1);
    if(!quiet)
      printf("req client=%d i=%d reqid=%d ok=%d err=%d gen=%d queue_us=%lu "
             "ttft_us=%lu tpot_us=%ld e2e_us=%lu submit=%lu\n", r->client,
             r->i, r->reqid, r->ok, r->err, r->gen,
             r->ok ? r->dispatch - r->submit : 0,
             r->ok ? r->first - r->submit : 0, r->ok ? tp : -1,
             r->ok ? r->waited - r->submit : 0, r->submit);
    if(!r->ok)
      continue;
    ok++;
    tokens += r->gen;
    queue[ntt] = r->dispatch - r->submit;
    ttft[ntt] = r->first - r->submit;
    e2e[ntt++] = r->waited - r->submit;
    if(tp >= 0)
      tpot[ntp++] = tp;
  }
  char rps[32], tps[32];
  ratio(rps, sizeof(rps), (uint64)nrec * 1000000, wall);
  ratio(tps, sizeof(tps), tokens * 1000000, wall);
  printf("total: requests=%d ok=%d failed=%d tokens=%lu wall_us=%lu "
         "req_per_s=%s tok_per_s=%s\n", nrec, ok, nrec - ok, tokens, wall,
         rps, tps);
  summary("ttft_us", ttft, ntt);
  summary("tpot_us", tpot, ntp);
  summary("e2e_us", e2e, ntt);
  summary("queue_us", queue, ntt);

  if(ai_stats(&s1) < 0)
    die("ai_stats failed");
  printf("stats: free=%d queued=%d running=%d done=%d failed=%d orphans=%d "
         "workers=%d submitted=+%lu completed=+%lu failed=+%lu\n",
         s1.slots[AI_FREE], s1.slots[AI_QUEUED], s1.slots[AI_RUNNING],
         s1.slots[AI_DONE], s1.slots[AI_FAILED], s1.orphans, s1.workers,
         s1.submitted - s0.submitted, s1.completed - s0.completed,
         s1.failed - s0.failed);
  int leaked = AI_NSLOT - s1.slots[AI_FREE] - (AI_NSLOT - s0.slots[AI_FREE]);
  if(ok != nclients * nreq){
    printf("aibench: FAIL (%d of %d requests failed or differ from the "
           "reference)\n", nclients * nreq - ok, nclients * nreq);
    return 1;
  }
  if(leaked > 0){
    printf("aibench: FAIL (%d request slots still in use)\n", leaked);
    return 1;
  }
  printf("aibench: PASS\n");
  return 0;
}
