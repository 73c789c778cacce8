// aistress: a bounded soak of the AI service. More clients than request
// slots submit mixed short and long requests of prompts of their own, in
// several styles (submit+wait, batches of non-blocking submits waited in a
// random order, ai_call, submit+poll with ai_query); a killer process kills
// clients mid-wait and, with -d, ai_daemon's workers and supervisor
// mid-request (init and the supervisor restart them). When the time is up
// the service must be whole again: every slot free, nothing queued, no
// orphan, all workers back, no client left, free memory back to where it
// started.
//
//   aistress [-s SEED] [-t SECONDS] [-c CLIENTS] [-k PERCENT] [-d PERCENT]
//            [-L PERCENT] [-q]
//
//   -s SEED     prompts, lengths and styles (default 1)
//   -t SECONDS  how long clients start new requests (default 10)
//   -c CLIENTS  client processes at once (default 12, at most 32)
//   -k PERCENT  chance that the killer kills a client at each of its wake-ups
//               (every 20-80 ms; default 10)
//   -d PERCENT  chance that it kills an ai_daemon process (default 0)
//   -L PERCENT  share of long requests (64..256 tokens; default 20), the
//               others 1..16
//   -q          no per-request lines
//
// Every finished request is one line, so that the host can check each
// result against its own engine (harness/stress.py does):
//   ok c=CLIENT id=REQID n=NTOKENS p=NPREDICT prompt=ID,ID,... len=LEN fnv=HASH
//   fail c=CLIENT id=REQID err=NAME
// (HASH: 32-bit FNV-1a of the result text "id id id"; greedy decoding,
// exactly NPREDICT tokens.) Clients send fixed 128-byte records to the
// parent through one pipe (whole records: the pipe's buffer is a multiple
// of them), and only the parent prints. Last lines:
//   aistress: requests=N ok=N failed=N (ERR=N ...) client_kills=N
//       daemon_kills=N respawns=N
//   aistress: slots_free=8/8 queued=0 orphans=0 workers=W/W
//       free_pages=A->B stuck=0
//   aistress: PASS | aistress: FAIL (why)

#include "types.h"
#include "param.h"
#include "procinfo.h"
#include "virtio_ai.h"
#include "user.h"

#define MAXCLIENTS  32
#define MAXPROMPT   24
#define MAXPREDICT  256
#define RECMAGIC    0x53544941    // "AITS"
#define OUTCAP      (MAXPREDICT * 11 + 16)

struct rec {
  uint32 magic;
  short client, kind;           // kind 1 = ok, 2 = failed, 3 = counts (killer, manager)
  int reqid;
  short err, ntok;
  int npredict;
  int len;
  uint32 fnv;
  uint32 unused;
  uint32 prompt[MAXPROMPT];
};
_Static_assert(sizeof(struct rec) == 128, "a record is 128 bytes");
_Static_assert(PIPESIZE % sizeof(struct rec) == 0, "records stay whole in the pipe");

static int seed = 1, seconds = 10, nclients = 12, killpct = 10, daemonpct = 0, longpct = 20;
static int quiet;
static struct ai_info info;
static uint64 deadline;
static int wfd;                 // the pipe's write end
static int parentpid;

static char *errname[] = {
  "OK", "EINVAL", "ERANGE", "ETOOLONG", "ENODEV", "EBUSY", "EPERM", "ESMALL", "EWORKER",
  "EDEVICE", "EKILLED", "ECANCELED", "other",
};

static uint64 rng;

static uint64
rnd(void)
{
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717UL;
}

static void
reseed(uint64 a, uint64 b)
{
  rng = 0x9E3779B97F4A7C15UL ^ (a * 0xBF58476D1CE4E5B9UL) ^ (b * 0x94D049BB133111EBUL);
  if(rng == 0)
    rng = 1;
  rnd();
}

static int
pick(int n)
{
  return rnd() % n;
}

static uint32
fnv1a(const char *s, int n)
{
  uint32 h = 2166136261u;

  for(int i = 0; i < n; i++){
    h ^= (uchar)s[i];
    h *= 16777619u;
  }
  return h;
}

// ------------------------------------------------------------ a client

static int client;
static char out[OUTCAP];

struct req {
  int id;
  int ntok, npredict;
  uint32 prompt[MAXPROMPT];
};

static void
newreq(struct req *r)
{
  r->id = 0;
  r->ntok = 1 + pick(MAXPROMPT);
  r->npredict = pick(100) < longpct ? 64 + pick(MAXPREDICT - 63) : 1 + pick(16);
  if((uint64)r->ntok + r->npredict > info.max_context)
    r->npredict = info.max_context - r->ntok;
  for(int i = 0; i < r->ntok; i++)
    r->prompt[i] = rnd() % info.vocab_size;
}

static void
report(struct req *r, int len)
{
  struct rec rec;

  memset(&rec, 0, sizeof(rec));
  rec.magic = RECMAGIC;
  rec.client = client;
  rec.reqid = r->id;
  rec.ntok = r->ntok;
  rec.npredict = r->npredict;
  memmove(rec.prompt, r->prompt, sizeof(rec.prompt));
  if(len >= 0){
    rec.kind = 1;
    rec.len = len;
    rec.fnv = fnv1a(out, len);
  } else {
    rec.kind = 2;
    rec.err = ai_lasterr();
  }
  write(wfd, &rec, sizeof(rec));
}

static int
submit(struct req *r, int flags)
{
  struct ai_submit_args a;

  memset(&a, 0, sizeof(a));
  a.tokens = (uint64)r->prompt;
  a.ntokens = r->ntok;
  a.npredict = r->npredict;
  a.flags = flags;
  return r->id = ai_submitx(&a);
}

static void
clientloop(void)
{
  struct req q[3];
  struct ai_status st;
  int k, n, order[3];

  while(time_us() < deadline){
    switch(pick(4)){
    case 0:                     // submit, wait
      newreq(&q[0]);
      if(submit(&q[0], 0) < 0)
        report(&q[0], -1);
      else
        report(&q[0], ai_wait(q[0].id, out, sizeof(out)));
      break;
    case 1:                     // a batch, never blocking for a slot while holding one
      n = 0;
      for(k = 0; k < 1 + pick(3); k++){
        newreq(&q[n]);
        if(submit(&q[n], AI_NONBLOCK) > 0)
          n++;
        else if(ai_lasterr() != AI_EBUSY)
          report(&q[n], -1);
      }
      for(k = 0; k < n; k++)
        order[k] = k;
      for(k = n - 1; k > 0; k--){
        int j = pick(k + 1), t = order[k];
        order[k] = order[j];
        order[j] = t;
      }
      for(k = 0; k < n; k++)
        report(&q[order[k]], ai_wait(q[order[k]].id, out, sizeof(out)));
      if(n == 0)
        sleep(1);               // every slot taken: let the others finish
      break;
    case 2:                     // ai_call: no id
      newreq(&q[0]);
      report(&q[0], ai_call(q[0].prompt, q[0].ntok, q[0].npredict, out, sizeof(out)));
      break;
    case 3:                     // submit, poll until finished, then take it
      newreq(&q[0]);
      if(submit(&q[0], 0) < 0){
        report(&q[0], -1);
        break;
      }
      while(ai_query(q[0].id, &st) == 0 && (st.state == AI_QUEUED || st.state == AI_RUNNING))
        sleep(1);
      report(&q[0], ai_wait(q[0].id, out, sizeof(out)));
      break;
    }
  }
  exit(0);
}

// ------------------------------------------------------------ the killer

static int
isdaemon(struct procinfo *p)
{
  return strcmp(p->name, "ai_worker") == 0 || strcmp(p->name, "ai_daemon") == 0;
}

// Sends a helper's counts to the parent as a record of kind 3 (an exit
// status would cap them at 255).
static void
sendcounts(int ckills, int dkills, int respawns)
{
  struct rec r;

  memset(&r, 0, sizeof(r));
  r.magic = RECMAGIC;
  r.kind = 3;
  r.reqid = ckills;
  r.npredict = dkills;
  r.len = respawns;
  write(wfd, &r, sizeof(r));
}

// Kills clients (children of mgr) and ai_daemon processes at random moments
// until the deadline, then sends its counts.
static void
killer(int mgr)
{
  static struct procinfo pt[NPROC];
  int n, ck = 0, dk = 0, cand[NPROC], nc;

  reseed(seed, 1000);
  while(time_us() < deadline){
    sleep(2 + pick(7));
    n = procinfo(pt, NPROC);
    if(pick(100) < killpct){
      nc = 0;
      for(int i = 0; i < n; i++)
        if(pt[i].ppid == mgr && pt[i].state != PS_ZOMBIE && !pt[i].killed)
          cand[nc++] = pt[i].pid;
      if(nc && kill(cand[pick(nc)]) == 0)
        ck++;
    }
    if(pick(100) < daemonpct){
      nc = 0;
      for(int i = 0; i < n; i++)
        if(isdaemon(&pt[i]) && pt[i].state != PS_ZOMBIE && !pt[i].killed &&
           (strcmp(pt[i].name, "ai_worker") == 0 || pick(5) == 0))
          cand[nc++] = pt[i].pid;
      if(nc && kill(cand[pick(nc)]) == 0)
        dk++;
    }
  }
  sendcounts(ck, dk, 0);
  exit(0);
}

// ------------------------------------------------------------ the manager

// Keeps nclients clients going until the deadline, restarting killed ones;
// then sends the number of restarts.
static void
manager(void)
{
  int pids[MAXCLIENTS], gens[MAXCLIENTS], pid, status, respawns = 0, live = 0;

  for(int c = 0; c < nclients; c++){
    pids[c] = -1;
    gens[c] = 0;
  }
  for(;;){
    for(int c = 0; c < nclients && time_us() < deadline; c++){
      if(pids[c] > 0)
        continue;
      if(gens[c] > 0)
        respawns++;
      reseed(seed, c * 100003 + gens[c]++);
      client = c;
      if((pid = fork()) == 0)
        clientloop();
      if(pid > 0){
        pids[c] = pid;
        live++;
      }
    }
    if(live == 0 || (pid = wait(&status)) < 0)
      break;
    for(int c = 0; c < nclients; c++)
      if(pids[c] == pid){
        pids[c] = -1;
        live--;
      }
  }
  sendcounts(0, 0, respawns);
  close(wfd);
  exit(0);
}

// ------------------------------------------------------------ the parent

static int
service_whole(struct ai_stats *a, struct ai_info *i, int workers0)
{
  return a->slots[AI_FREE] == AI_NSLOT && a->queued == 0 && a->orphans == 0 &&
         i->workers >= workers0;
}

static void
usage(void)
{
  fprintf(2, "usage: aistress [-s SEED] [-t SECONDS] [-c CLIENTS] [-k PERCENT] "
             "[-d PERCENT] [-L PERCENT] [-q]\n");
  exit(2);
}

int
main(int argc, char *argv[])
{
  int fds[2], mgr, n, requests = 0, oks = 0, fails = 0, bad = 0;
  int errs[AI_ECANCELED + 2], ckills = 0, dkills = 0, respawns = 0, stuck = 0, workers0;
  long free0, free1;
  struct rec r;
  struct ai_stats a0, a1;
  struct ai_info i1;
  static struct procinfo pt[NPROC];
  char why[128] = "";
  static char line[512];

  for(int i = 1; i < argc; i++){
    if(strcmp(argv[i], "-q") == 0){
      quiet = 1;
      continue;
    }
    if(i + 1 >= argc)
      usage();
    if(strcmp(argv[i], "-s") == 0) seed = atoi(argv[++i]);
    else if(strcmp(argv[i], "-t") == 0) seconds = atoi(argv[++i]);
    else if(strcmp(argv[i], "-c") == 0) nclients = atoi(argv[++i]);
    else if(strcmp(argv[i], "-k") == 0) killpct = atoi(argv[++i]);
    else if(strcmp(argv[i], "-d") == 0) daemonpct = atoi(argv[++i]);
    else if(strcmp(argv[i], "-L") == 0) longpct = atoi(argv[++i]);
    else usage();
  }
  if(nclients < 1 || nclients > MAXCLIENTS || seconds < 1)
    usage();
  if(ai_info(&info) < 0 || info.state != AI_DEV_READY){
    fprintf(2, "aistress: no AI model ready (%s)\n", ai_strerror(ai_lasterr()));
    exit(2);
  }
  workers0 = info.workers;
  memset(errs, 0, sizeof(errs));
  parentpid = getpid();
  printf("aistress: seed=%d seconds=%d clients=%d kill=%d%% daemon_kill=%d%% long=%d%% "
         "model=\"%s\" vocab=%d context=%d workers=%d\n", seed, seconds, nclients, killpct,
         daemonpct, longpct, info.name, info.vocab_size, info.max_context, workers0);
  ai_stats(&a0);
  free0 = freemem();
  deadline = time_us() + seconds * 1000000UL;
  if(pipe(fds) < 0){
    fprintf(2, "aistress: pipe failed\n");
    exit(2);
  }
  wfd = fds[1];
  if((mgr = fork()) == 0){
    close(fds[0]);
    manager();
  }
  if(fork() == 0){                // the killer
    close(fds[0]);
    killer(mgr);
  }
  close(fds[1]);

  // every record, until the manager, the killer and all clients are gone
  while((n = read(fds[0], &r, sizeof(r))) == sizeof(r)){
    if(r.magic != RECMAGIC){
      strcpy(why, "a torn record");
      bad = 1;
      continue;
    }
    if(r.kind == 3){            // a helper's counts, not a request
      ckills += r.reqid;
      dkills += r.npredict;
      respawns += r.len;
      continue;
    }
    requests++;
    if(r.kind == 1){
      oks++;
      if(!quiet){
        // one write per line (the console keeps a write whole)
        int at = snprintf(line, sizeof(line), "ok c=%d id=%d n=%d p=%d prompt=", r.client,
                          r.reqid, r.ntok, r.npredict);
        for(int i = 0; i < r.ntok && i < MAXPROMPT; i++)
          at += snprintf(line + at, sizeof(line) - at, i ? ",%d" : "%d", r.prompt[i]);
        snprintf(line + at, sizeof(line) - at, " len=%d fnv=%x\n", r.len, r.fnv);
        write(1, line, strlen(line));
      }
    } else {
      fails++;
      errs[r.err >= 0 && r.err <= AI_ECANCELED ? r.err : AI_ECANCELED + 1]++;
      if(!quiet)
        printf("fail c=%d id=%d err=%s\n", r.client, r.reqid,
               errname[r.err >= 0 && r.err <= AI_ECANCELED ? r.err : AI_ECANCELED + 1]);
    }
  }
  close(fds[0]);
  while(wait(0) >= 0)              // the manager and the killer
    ;

  // the service must come back whole: orphans finish and are freed, init
  // restarts a killed supervisor, which restarts its workers
  for(int i = 0; i < 3000; i++){
    ai_stats(&a1);
    ai_info(&i1);
    if(service_whole(&a1, &i1, workers0) && freemem() == free0)
      break;
    sleep(1);
  }
  ai_stats(&a1);
  ai_info(&i1);
  free1 = freemem();
  n = procinfo(pt, NPROC);
  for(int i = 0; i < n; i++)
    if(strcmp(pt[i].name, "aistress") == 0 && pt[i].pid != parentpid)
      stuck++;

  printf("aistress: requests=%d ok=%d failed=%d (", requests, oks, fails);
  for(int e = 0, first = 1; e <= AI_ECANCELED + 1; e++)
    if(errs[e]){
      printf("%s%s=%d", first ? "" : " ", errname[e], errs[e]);
      first = 0;
    }
  printf(") client_kills=%d daemon_kills=%d respawns=%d submitted=%d completed=%d "
         "failed_in_kernel=%d\n", ckills, dkills, respawns, (int)(a1.submitted - a0.submitted),
         (int)(a1.completed - a0.completed), (int)(a1.failed - a0.failed));
  printf("aistress: slots_free=%d/%d queued=%d orphans=%d workers=%d/%d free_pages=%ld->%ld "
         "stuck=%d\n", a1.slots[AI_FREE], AI_NSLOT, a1.queued, a1.orphans, i1.workers,
         workers0, free0, free1, stuck);
  if(!bad && !service_whole(&a1, &i1, workers0))
    strcpy(why, "the service did not come back whole");
  if(!bad && !why[0] && free1 != free0)
    snprintf(why, sizeof(why), "%ld pages leaked", free0 - free1);
  if(!why[0] && stuck)
    snprintf(why, sizeof(why), "%d clients left", stuck);
  if(!why[0] && oks == 0)
    strcpy(why, "no request completed");
  if(why[0])
    printf("aistress: FAIL (%s)\n", why);
  else
    printf("aistress: PASS\n");
  exit(why[0] ? 1 : 0);
}
