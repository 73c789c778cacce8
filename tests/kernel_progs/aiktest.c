// aiktest: the kernel's AI service (kernel_c/ai_service.c) from the guest,
// run by tests/test_ai_kernel.py (which compiles this file and puts it in a
// scratch file-system image, with or without /ai_daemon).
//
// With the AI device and ai_daemon:
//   aiktest sem         the semantics table: only the owner may query or
//                       wait (a forked child and another program get
//                       AI_EPERM); query never blocks or consumes; the first
//                       wait copies out and frees, a second fails; AI_ESMALL
//                       keeps the result; live progress; timestamps; ids
//                       grow; no slot or page leaks
//   aiktest args        bad arguments and pointers: -1 and the right
//                       ai_lasterr(), nothing taken, nothing leaked
//   aiktest full        back-pressure: all slots taken, AI_NONBLOCK gets
//                       AI_EBUSY, a blocked submit wakes when a slot frees
//   aiktest killsubmit  kill ends a submit blocked on full slots
//   aiktest killwait    kill ends an ai_wait; the orphan is cancelled, freed
//   aiktest exit        a client exits with requests DONE, RUNNING, QUEUED:
//                       every slot and page comes back
//   aiktest storm S N   N clients make random AI calls (good, bad, blocking,
//                       non-blocking), kill each other and exit with
//                       requests outstanding; the kernel survives, every
//                       slot and page comes back
// With the AI device and no ai_daemon (this program is the worker):
//   aiktest worker      the worker calls: get/complete (course protocol),
//                       failure reports, get/run (device), a worker killed
//                       while running (AI_EWORKER) or idle, queued requests
//                       outliving their worker, orphans (AI_ECANCELED), a
//                       full worker table
//   aiktest loading     (no model at boot) AI_ENODEV, then a submit that
//                       sleeps while the model loads, woken when it is ready
// Without the AI device:
//   aiktest nodev       AI_ENODEV; ai_stats still works
//   aiktest peek ID     (helper) query/wait someone else's request: AI_EPERM
//
// Each prints "aiktest NAME: OK ..." (exit 0) or "aiktest NAME: FAIL ..."
// lines (exit 1).

#include "types.h"
#include "param.h"
#include "procinfo.h"
#include "riscv.h"
#include "vmlayout.h"
#include "virtio_ai.h"
#include "user.h"

#define LONG     3000           // tokens of a request that runs a while
#define TEXTMAX  (AI_MAX_PREDICT * 11 + 1)

static char *name = "?";
static int nfail, checks;
static uint64 brk0;
static char out[TEXTMAX];
static char out2[TEXTMAX];
static struct ai_info info;
static uint32 prompt[5] = { 1, 2, 3, 4, 5 };

static void
failf(char *what, long got, long want)
{
  printf("aiktest %s: FAIL %s (got %ld, want %ld)\n", name, what, got, want);
  nfail++;
}

// cond must hold
#define CHECK(what, cond) do { \
    checks++; \
    if(!(cond)) \
      failf(what, 0, 1); \
  } while(0)

// a call that must return -1 with ai_lasterr() == err
#define BAD(what, call, err) do { \
    long r_ = (long)(call); \
    int e_ = ai_lasterr(); \
    checks++; \
    if(r_ != -1) \
      failf(what ": result", r_, -1); \
    else if(e_ != (err)) \
      failf(what ": ai_lasterr", e_, err); \
  } while(0)

// a call that must succeed (>= 0); its value
static long
ok(char *what, long r)
{
  checks++;
  if(r < 0){
    printf("aiktest %s: FAIL %s (got -1, ai_lasterr %d)\n", name, what,
           ai_lasterr());
    nfail++;
  }
  return r;
}

static void
finish(char *fmt, long a, long b)
{
  if(nfail)
    exit(1);
  printf("aiktest %s: OK ", name);
  printf(fmt, a, b);
  printf("\n");
  exit(0);
}

static int
submit(uint32 *t, int n, int predict, int flags)
{
  struct ai_submit_args a;

  memset(&a, 0, sizeof(a));
  a.tokens = (uint64)t;
  a.ntokens = n;
  a.npredict = predict;
  a.flags = flags;
  return ai_submitx(&a);
}

static int
nwords(char *s)
{
  int n = 0, in = 0;

  for(; *s; s++){
    if(*s == ' '){
      in = 0;
    } else if(!in){
      in = 1;
      n++;
    }
  }
  return n;
}

// The state of process pid (PS_*), or -1 if it is gone.
static int
pstate(int pid)
{
  static struct procinfo pi[NPROC];
  int i, n = procinfo(pi, NPROC);

  for(i = 0; i < n; i++)
    if(pi[i].pid == pid)
      return pi[i].state;
  return -1;
}

// Wait up to ~5 s until process pid sleeps. Returns 0, or -1.
static int
until_sleeping(int pid)
{
  for(int i = 0; i < 500; i++){
    if(pstate(pid) == PS_SLEEPING)
      return 0;
    sleep(1);
  }
  return -1;
}

// Wait up to ~20 s until no request is left in any slot. Returns 0/-1.
static int
until_idle(struct ai_stats *st)
{
  for(int i = 0; i < 2000; i++){
    if(ai_stats(st) == 0 && st->slots[AI_FREE] == AI_NSLOT && st->queued == 0 &&
       st->orphans == 0)
      return 0;
    sleep(1);
  }
  return -1;
}

static void
check_idle(char *what)
{
  struct ai_stats st;

  checks++;
  if(until_idle(&st) < 0){
    printf("aiktest %s: FAIL %s: slots still in use (free %d queued %d "
           "running %d done %d failed %d orphans %d)\n", name, what,
           st.slots[AI_FREE], st.slots[AI_QUEUED], st.slots[AI_RUNNING],
           st.slots[AI_DONE], st.slots[AI_FAILED], st.orphans);
    nfail++;
  }
}

// Wait up to ~10 s until request id (ours) reaches state (or later).
static int
until_state(int id, int state, struct ai_status *st)
{
  for(int i = 0; i < 1000; i++){
    if(ai_query(id, st) < 0)
      return -1;
    if(st->state >= state)
      return 0;
    sleep(1);
  }
  return -1;
}

// The request runs on the device and is far from done.
static int
until_running(int id, struct ai_status *st)
{
  for(int i = 0; i < 100000; i++){
    if(ai_query(id, st) < 0)
      return -1;
    if(st->state == AI_RUNNING && st->t_accept != 0)
      return 0;
    if(st->state > AI_RUNNING)
      return -1;
  }
  return -1;
}

static void
need_model(void)
{
  if(ai_info(&info) < 0 || info.state != AI_DEV_READY){
    printf("aiktest %s: FAIL no AI model ready (ai_lasterr %d)\n", name,
           ai_lasterr());
    exit(1);
  }
}

// longest request the model allows for our 5-token prompt
static int
longest(void)
{
  int n = info.max_context - 5;

  return n < LONG ? n : LONG;
}

// ----------------------------------------------------------------- sem

static void
sem(void)
{
  struct ai_stats s0, s1;
  struct ai_status st, st2;
  char ref[256], idtext[16];
  int id1, id2, n, len, pid, status, lng;
  long free0;
  char *argv[4];

  name = "sem";
  need_model();
  CHECK("info: present", info.present == 1);
  CHECK("info: vocabulary", info.vocab_size > 5);
  CHECK("info: workers", info.workers >= 1);
  ok("stats", ai_stats(&s0));
  CHECK("stats: all slots free", s0.slots[AI_FREE] == AI_NSLOT);
  free0 = freemem();
  lng = longest();

  // the synchronous call, for reference
  n = ok("ai_call", ai_call(prompt, 5, 8, ref, sizeof(ref)));
  CHECK("ai_call: 8 ids", nwords(ref) == 8 && strlen(ref) == n);
  CHECK("lasterr after success", ai_lasterr() == AI_OK);
  printf("aiktest sem: ids %s\n", ref);

  // query before completion: not finished, and not consumed
  id1 = ok("submit long", submit(prompt, 5, lng, 0));
  ok("query", ai_query(id1, &st));
  CHECK("query: not finished", st.state == AI_QUEUED || st.state == AI_RUNNING);
  CHECK("query: fields", st.reqid == id1 && st.owner == getpid() &&
        st.ntokens == 5 && st.npredict == lng && st.err == AI_OK &&
        st.result_len == 0 && st.t_submit > 0);
  ok("query again", ai_query(id1, &st2));
  CHECK("query again: same request", st2.reqid == id1 && st2.state >= st.state);

  // live progress while it runs
  int seen = 0, last = 0, monotonic = 1;
  CHECK("a worker takes it to the device", until_running(id1, &st) == 0);
  for(int i = 0; i < 200000 && ai_query(id1, &st) == 0 && st.state == AI_RUNNING; i++){
    if(st.ngenerated < last)
      monotonic = 0;
    if(st.ngenerated > 0 && st.ngenerated < lng){
      seen++;
      if(st.t_first == 0)
        monotonic = 0;
    }
    last = st.ngenerated;
  }
  CHECK("progress: tokens counted while running", seen > 0);
  CHECK("progress: never backwards, t_first set", monotonic);

  // not the owner: a forked child, and another program
  pid = fork();
  if(pid == 0){
    int bad = 0;
    if(ai_query(id1, &st) != -1 || ai_lasterr() != AI_EPERM)
      bad = 1;
    if(ai_wait(id1, out, sizeof(out)) != -1 || ai_lasterr() != AI_EPERM)
      bad = 1;
    exit(bad);
  }
  wait(&status);
  CHECK("forked child may not query or wait", status == 0);
  snprintf(idtext, sizeof(idtext), "%d", id1);
  argv[0] = "aiktest";
  argv[1] = "peek";
  argv[2] = idtext;
  argv[3] = 0;
  if((pid = fork()) == 0){
    exec("/aiktest", argv);
    exit(2);
  }
  wait(&status);
  CHECK("another program may not query or wait", status == 0);
  ok("query after the others tried", ai_query(id1, &st));
  CHECK("still ours and intact", st.reqid == id1 && st.err == AI_OK);

  // a too-small buffer: AI_ESMALL after it finished, result kept
  BAD("wait cap 1", ai_wait(id1, out, 1), AI_ESMALL);
  ok("query done", ai_query(id1, &st));
  CHECK("query: DONE", st.state == AI_DONE && st.err == AI_OK);
  CHECK("query: all tokens", st.ngenerated == lng);
  CHECK("query: result_len", st.result_len > 0);
  CHECK("timestamps in order", st.t_submit <= st.t_dispatch &&
        st.t_dispatch <= st.t_accept && st.t_accept <= st.t_first &&
        st.t_first <= st.t_done && st.t_submit > 0);
  len = st.result_len;
  BAD("wait cap = len (no room for the NUL)", ai_wait(id1, out, len), AI_ESMALL);
  n = ok("wait", ai_wait(id1, out, len + 1));
  CHECK("wait: length", n == len && strlen(out) == len);
  CHECK("wait: one id per token", nwords(out) == lng);
  BAD("second wait", ai_wait(id1, out, sizeof(out)), AI_EPERM);
  BAD("query after the wait", ai_query(id1, &st), AI_EPERM);

  // the same prompt asynchronously gives the same ids; ids only grow
  id2 = ok("submit", submit(prompt, 5, 8, 0));
  CHECK("ids grow", id2 > id1);
  n = ok("wait", ai_wait(id2, out2, sizeof(out2)));
  CHECK("async result == ai_call result", strcmp(out2, ref) == 0);

  // the vocabulary's last id is fine
  uint32 edge[2] = { 1, 0 };
  edge[1] = info.vocab_size - 1;
  id2 = ok("submit at the vocabulary's edge", submit(edge, 2, 1, 0));
  ok("wait at the vocabulary's edge", ai_wait(id2, out2, sizeof(out2)));

  ok("stats", ai_stats(&s1));
  CHECK("stats: all slots free again", s1.slots[AI_FREE] == AI_NSLOT &&
        s1.queued == 0 && s1.orphans == 0);
  CHECK("stats: counted", s1.submitted == s0.submitted + 4 &&
        s1.completed == s0.completed + 4 && s1.next_id > id2);
  CHECK("no page leaked", freemem() == free0);
  finish("%d checks", checks, 0);
}

// another program tries request id
static void
peek(int id)
{
  struct ai_status st;

  name = "peek";
  BAD("query someone else's request", ai_query(id, &st), AI_EPERM);
  BAD("wait someone else's request", ai_wait(id, out, sizeof(out)), AI_EPERM);
  exit(nfail ? 1 : 0);
}

// ---------------------------------------------------------------- args

// addresses no AI call may accept
static uint64
badaddr(int i)
{
  uint64 guard = brk0 - (USERSTACK + 1) * PGSIZE;
  uint64 v[] = {
    0x80000000UL, TRAPFRAME, TRAMPOLINE, MAXVA - 8, MAXVA, 1UL << 63,
    ~0UL & ~7UL, guard, PGROUNDUP(brk0) + 16 * PGSIZE,
  };
  if(i >= sizeof(v) / sizeof(v[0]))
    return 0;
  return v[i];
}

static void
args(void)
{
  struct ai_submit_args a;
  struct ai_status st;
  struct ai_stats s0, s1;
  static uint32 toks[AI_MAX_TOKENS + 1];
  uint64 p, text = (uint64)args;
  int id;
  long free0;
  char *end;

  name = "args";
  need_model();
  ok("stats", ai_stats(&s0));
  free0 = freemem();

  // the argument block
  for(int i = 0; (p = badaddr(i)) != 0; i++){
    BAD("submitx bad args pointer", ai_submitx((struct ai_submit_args *)p), AI_EINVAL);
    BAD("query bad status pointer", ai_query(1, (struct ai_status *)p), AI_EINVAL);
    BAD("wait bad buffer", ai_wait(1, (char *)p, 8), AI_EINVAL);
    BAD("call bad buffer", ai_call(prompt, 5, 1, (char *)p, 8), AI_EINVAL);
    BAD("call bad tokens", ai_call((uint32 *)(p & ~3UL), 5, 1, out, 64), AI_EINVAL);
    BAD("info bad pointer", ai_info((struct ai_info *)p), AI_EINVAL);
    BAD("stats bad pointer", ai_stats((struct ai_stats *)p), AI_EINVAL);
    memset(&a, 0, sizeof(a));
    a.tokens = p & ~3UL;
    a.ntokens = 5;
    a.npredict = 1;
    BAD("submit bad tokens pointer", ai_submitx(&a), AI_EINVAL);
  }
  BAD("submitx NULL", ai_submitx(0), AI_EINVAL);
  BAD("submitx unaligned", ai_submitx((struct ai_submit_args *)(out + 4)), AI_EINVAL);
  BAD("query unaligned", ai_query(1, (struct ai_status *)(out + 4)), AI_EINVAL);
  BAD("query into text", ai_query(1, (struct ai_status *)(text & ~7UL)), AI_EINVAL);
  BAD("wait into text", ai_wait(1, (char *)text, 8), AI_EINVAL);
  BAD("info into text", ai_info((struct ai_info *)(text & ~7UL)), AI_EINVAL);

  // counts, flags, sampling
  int counts[][2] = {
    { 0, 1 }, { -1, 1 }, { AI_MAX_TOKENS + 1, 1 }, { 1 << 30, 1 },
    { 5, 0 }, { 5, -1 }, { 5, AI_MAX_PREDICT + 1 }, { 5, 0x7fffffff },
  };
  for(int i = 0; i < sizeof(counts) / sizeof(counts[0]); i++){
    memset(&a, 0, sizeof(a));
    a.tokens = (uint64)toks;
    a.ntokens = counts[i][0];
    a.npredict = counts[i][1];
    BAD("submit bad counts", ai_submitx(&a), AI_EINVAL);
    BAD("call bad counts", ai_call(toks, counts[i][0], counts[i][1], out, 64),
        AI_EINVAL);
  }
  memset(&a, 0, sizeof(a));
  a.tokens = (uint64)toks;
  a.ntokens = 5;
  a.npredict = 1;
  a.flags = 0x100;
  BAD("submit unknown flag", ai_submitx(&a), AI_EINVAL);
  a.flags = 0;
  a.speculate = AI_MAX_SPECULATE + 1;
  BAD("submit speculate past the limit", ai_submitx(&a), AI_EINVAL);
  a.speculate = 0;
  a.top_p_milli = 1001;
  BAD("submit top_p > 1", ai_submitx(&a), AI_EINVAL);
  a.top_p_milli = 0;
  a.tokens = (uint64)toks + 2;
  BAD("submit unaligned tokens", ai_submitx(&a), AI_EINVAL);

  // tokens running off the end of memory
  end = sbrk(0);
  a.tokens = (uint64)end - 8;
  a.ntokens = 5;
  BAD("submit tokens past the break", ai_submitx(&a), AI_EINVAL);
  BAD("wait buffer past the break", ai_wait(1, end - 4, 8), AI_EINVAL);

  // the model's limits
  toks[0] = info.vocab_size;
  BAD("token == vocab", ai_call(toks, 1, 1, out, 64), AI_ERANGE);
  toks[0] = 1;
  toks[3] = 0xffffffff;
  BAD("token 2^32-1", ai_call(toks, 5, 1, out, 64), AI_ERANGE);
  toks[3] = 1;
  int p255 = info.max_context - AI_MAX_TOKENS + 1;
  if(p255 >= 1 && p255 <= AI_MAX_PREDICT)
    BAD("prompt + predict > context", ai_call(toks, AI_MAX_TOKENS, p255, out, 64),
        AI_ETOOLONG);
  if(info.max_context <= AI_MAX_PREDICT)
    BAD("predict = context", ai_call(toks, 1, info.max_context, out, 64),
        AI_ETOOLONG);

  // waits, queries and buffers
  int badids[] = { 0, -1, 9999, 0x7fffffff, -0x7fffffff };
  for(int i = 0; i < sizeof(badids) / sizeof(badids[0]); i++){
    BAD("wait unknown id", ai_wait(badids[i], out, sizeof(out)), AI_EPERM);
    BAD("query unknown id", ai_query(badids[i], &st), AI_EPERM);
  }
  BAD("wait cap 0", ai_wait(1, out, 0), AI_EINVAL);
  BAD("wait cap -5", ai_wait(1, out, -5), AI_EINVAL);
  BAD("wait NULL", ai_wait(1, 0, 8), AI_EINVAL);
  BAD("call cap 0", ai_call(prompt, 5, 1, out, 0), AI_EINVAL);

  // a result that does not fit ai_call's buffer is dropped, not leaked
  BAD("call cap 1", ai_call(prompt, 5, 4, out, 1), AI_ESMALL);

  // worker calls from a process that is not a worker
  id = ok("submit", submit(prompt, 5, 1, 0));
  struct ai_work w;
  BAD("worker_get: not a worker", ai_worker_get(toks, AI_MAX_TOKENS, &w), AI_EPERM);
  BAD("worker_run: not a worker", ai_worker_run(id), AI_EPERM);
  BAD("worker_complete: not a worker", ai_worker_complete(id, "1", 1, 0), AI_EPERM);
  ok("wait", ai_wait(id, out, sizeof(out)));


  ok("stats", ai_stats(&s1));
  CHECK("no slot taken by the bad calls", s1.slots[AI_FREE] == AI_NSLOT &&
        s1.queued == 0);
  CHECK("only the good requests counted", s1.submitted == s0.submitted + 2);
  CHECK("no page leaked", freemem() == free0);
  finish("%d checks", checks, 0);
}

// ---------------------------------------------------------- back-pressure

// Take every slot with small requests; their ids in ids[].
static void
fill(int *ids)
{
  for(int i = 0; i < AI_NSLOT; i++)
    ids[i] = ok("fill a slot", submit(prompt, 5, 4, 0));
}

static void
drain(int *ids, int from)
{
  for(int i = from; i < AI_NSLOT; i++)
    ok("wait", ai_wait(ids[i], out, sizeof(out)));
}

static void
full(void)
{
  int ids[AI_NSLOT], fds[2], pid, status, cid;
  struct ai_stats st;
  uint64 t_free, t_got;

  name = "full";
  need_model();
  fill(ids);
  ok("stats", ai_stats(&st));
  CHECK("every slot taken", st.slots[AI_FREE] == 0);
  BAD("AI_NONBLOCK with every slot taken", submit(prompt, 5, 4, AI_NONBLOCK), AI_EBUSY);

  pipe(fds);
  if((pid = fork()) == 0){
    int id = submit(prompt, 5, 4, 0);     // sleeps: no free slot
    uint64 t = time_us();
    write(fds[1], &id, sizeof(id));
    write(fds[1], &t, sizeof(t));
    exit(id > 0 && ai_wait(id, out, sizeof(out)) > 0 ? 0 : 1);
  }
  close(fds[1]);
  CHECK("blocked submit sleeps", until_sleeping(pid) == 0);
  sleep(5);
  CHECK("and stays asleep while nothing frees", pstate(pid) == PS_SLEEPING);
  t_free = time_us();
  ok("wait frees a slot", ai_wait(ids[0], out, sizeof(out)));
  CHECK("submit woke", read(fds[0], &cid, sizeof(cid)) == sizeof(cid) && cid > 0);
  CHECK("time", read(fds[0], &t_got, sizeof(t_got)) == sizeof(t_got));
  CHECK("submit returned only after the slot was freed", t_got >= t_free);
  wait(&status);
  CHECK("the woken child got its result", status == 0);
  close(fds[0]);
  drain(ids, 1);
  check_idle("after draining");
  finish("%d checks", checks, 0);
}

static void
killsubmit(void)
{
  int ids[AI_NSLOT], pid, status;
  struct ai_stats st0, st;

  name = "killsubmit";
  need_model();
  ok("stats", ai_stats(&st0));
  fill(ids);
  if((pid = fork()) == 0){
    submit(prompt, 5, 4, 0);
    exit(7);              // not reached: killed while asleep
  }
  CHECK("blocked submit sleeps", until_sleeping(pid) == 0);
  ok("kill", kill(pid));
  CHECK("killed child reaped", wait(&status) == pid);
  CHECK("killed child's status", status == -1);
  ok("stats", ai_stats(&st));
  CHECK("the killed submit took no slot", st.slots[AI_FREE] == 0 &&
        st.submitted == st0.submitted + AI_NSLOT);
  drain(ids, 0);
  check_idle("after draining");
  ok("stats", ai_stats(&st));
  CHECK("ids: none taken by the killed submit", st.next_id == ids[AI_NSLOT - 1] + 1);
  finish("%d checks", checks, 0);
}

static void
killwait(void)
{
  int pid, status, fds[2], id;
  struct ai_stats st;
  long free0 = freemem();

  name = "killwait";
  need_model();
  pipe(fds);
  if((pid = fork()) == 0){
    id = submit(prompt, 5, longest(), 0);
    write(fds[1], &id, sizeof(id));
    ai_wait(id, out, sizeof(out));
    exit(7);              // not reached: killed while asleep
  }
  close(fds[1]);
  CHECK("child submitted", read(fds[0], &id, sizeof(id)) == sizeof(id) && id > 0);
  close(fds[0]);
  CHECK("ai_wait sleeps", until_sleeping(pid) == 0);
  ok("stats", ai_stats(&st));
  CHECK("its request is still live", st.slots[AI_FREE] == AI_NSLOT - 1);
  ok("kill", kill(pid));
  CHECK("killed child reaped", wait(&status) == pid && status == -1);
  check_idle("after the owner died");
  CHECK("no page leaked", freemem() == free0);
  finish("%d checks", checks, 0);
}

// a client leaves with requests in every state
static void
exitclient(void)
{
  int pid, status;
  long free0 = freemem();
  struct ai_stats st0, st;

  name = "exit";
  need_model();
  ok("stats", ai_stats(&st0));
  if((pid = fork()) == 0){
    struct ai_status s;
    int id = submit(prompt, 5, 2, 0);
    if(id < 0 || until_state(id, AI_DONE, &s) < 0 || s.state != AI_DONE)
      exit(1);
    // then some that run and some that wait in the queue
    for(int i = 1; i < AI_NSLOT; i++)
      if(submit(prompt, 5, longest(), 0) < 0)
        exit(2);
    exit(0);              // without waiting for anything
  }
  CHECK("child reaped", wait(&status) == pid);
  CHECK("child submitted everything", status == 0);
  check_idle("after the client exited");
  ok("stats", ai_stats(&st));
  CHECK("all counted", st.submitted == st0.submitted + AI_NSLOT);
  CHECK("no page leaked", freemem() == free0);
  finish("%d checks", checks, 0);
}

// ---------------------------------------------------------------- storm

static uint64 rstate;

static uint
rnd(void)
{
  rstate = rstate * 6364136223846793005UL + 1442695040888963407UL;
  return rstate >> 33;
}

// One client's random life: submits (some non-blocking, some bad), waits
// with random buffers, queries, ai_calls, orphans left by a grandchild,
// kills of earlier siblings, and often an exit with requests outstanding.
static void
storm_client(int *sibs, int nsibs)
{
  int ids[16], nids = 0, id, r;
  struct ai_status st;
  struct ai_submit_args a;
  uint32 t[8];

  for(int i = 0; i < 8; i++)
    t[i] = rnd() % info.vocab_size;
  for(int op = 0; op < 30; op++){
    switch(rnd() % 10){
    case 0: case 1: case 2:
      // block for a slot only while holding none: clients that hold slots
      // and all block for more would wait for each other forever
      id = submit(t, 1 + rnd() % 8, 1 + rnd() % 64,
                  nids == 0 && rnd() % 2 ? 0 : AI_NONBLOCK);
      if(id > 0 && nids < 16)
        ids[nids++] = id;
      break;
    case 3: case 4:
      if(nids > 0){
        int k = rnd() % nids;
        r = ai_wait(ids[k], out, rnd() % 3 ? sizeof(out) : 1 + rnd() % 8);
        if(r >= 0 || ai_lasterr() != AI_ESMALL)
          ids[k] = ids[--nids];
      }
      break;
    case 5:
      ai_query(nids > 0 ? ids[rnd() % nids] : (int)rnd(), &st);
      break;
    case 6:
      if(nids == 0)
        ai_call(t, 1 + rnd() % 8, 1 + rnd() % 16, out, rnd() % 2 ? sizeof(out) : 2);
      break;
    case 7:
      if(fork() == 0){
        submit(t, 3, 32, AI_NONBLOCK);
        exit(0);          // leaves its request behind
      }
      break;
    case 8:
      if(nsibs > 0 && rnd() % 3 == 0)
        kill(sibs[rnd() % nsibs]);
      break;
    case 9:
      memset(&a, 0, sizeof(a));
      a.tokens = rnd() % 2 ? (uint64)t : badaddr(rnd() % 9);
      a.ntokens = (int)(rnd() % 300) - 20;
      a.npredict = (int)(rnd() % 5000) - 100;
      a.flags = rnd() % 4;
      ai_submitx(rnd() % 4 ? &a : (struct ai_submit_args *)badaddr(rnd() % 9));
      break;
    }
    if(rnd() % 25 == 0)
      exit(0);            // with whatever is outstanding
  }
  exit(0);
}

static void
storm(int seed, int n)
{
  int pids[64], status;
  long free0;
  struct ai_stats st0, st;

  name = "storm";
  need_model();
  ai_stats(&st0);
  if(n > 64)
    n = 64;
  free0 = freemem();
  for(int i = 0; i < n; i++){
    rstate = seed * 1000003UL + i;
    rnd();
    if((pids[i] = fork()) == 0)
      storm_client(pids, i);
  }
  for(int i = 0; i < n; i++)
    wait(&status);
  while(wait(&status) >= 0)   // grandchildren are init's; nothing else here
    ;
  check_idle("after the storm");
  // exited grandchildren are reaped by init; give it a moment
  for(int i = 0; i < 200 && freemem() != free0; i++)
    sleep(1);
  CHECK("no page leaked", freemem() == free0);
  ai_stats(&st);
  printf("aiktest storm: %d requests (%d completed, %d failed)\n",
         (int)(st.submitted - st0.submitted), (int)(st.completed - st0.completed),
         (int)(st.failed - st0.failed));
  finish("%d clients, seed %d", n, seed);
}

// ------------------------------------------------------------- workers

// A worker child obeys commands from the parent: one command per write,
// one answer {result, lasterr, work, tokens} back.
struct cmd {
  char op;              // g get, r run, c complete, x exit
  int id;
  int cap;              // get: token cap (-1 = tokens NULL)
  int status;           // complete
  int len;              // complete: text length (-1 = bad pointer)
  char text[32];
};

struct answer {
  int r;
  int err;
  struct ai_work w;
  uint32 tokens[8];
};

struct worker {
  int pid;
  int cmd;              // parent writes
  int ans;              // parent reads
};

static void
worker_loop(int cfd, int afd)
{
  struct cmd c;
  struct answer a;
  static uint32 toks[AI_MAX_TOKENS];

  if(ai_worker_register() < 0)
    exit(3);
  while(read(cfd, &c, sizeof(c)) == sizeof(c)){
    memset(&a, 0, sizeof(a));
    switch(c.op){
    case 'g':
      a.r = ai_worker_get(c.cap < 0 ? 0 : toks, c.cap < 0 ? 0 : c.cap, &a.w);
      memmove(a.tokens, toks, sizeof(a.tokens));
      break;
    case 'r':
      a.r = ai_worker_run(c.id);
      break;
    case 'c':
      a.r = ai_worker_complete(c.id, c.len < 0 ? (char *)MAXVA : c.text,
                               c.len < 0 ? 4 : c.len, c.status);
      break;
    case 'x':
      exit(0);
    }
    a.err = ai_lasterr();
    write(afd, &a, sizeof(a));
  }
  exit(0);
}

static void
wstart(struct worker *w)
{
  int c[2], a[2];

  pipe(c);
  pipe(a);
  if((w->pid = fork()) == 0){
    close(c[1]);
    close(a[0]);
    worker_loop(c[0], a[1]);
  }
  close(c[0]);
  close(a[1]);
  w->cmd = c[1];
  w->ans = a[0];
}

static void
wsend(struct worker *w, char op, int id, int cap, int status, char *text, int len)
{
  struct cmd c;

  memset(&c, 0, sizeof(c));
  c.op = op;
  c.id = id;
  c.cap = cap;
  c.status = status;
  c.len = len;
  if(text)
    strncpy(c.text, text, sizeof(c.text) - 1);
  write(w->cmd, &c, sizeof(c));
}

static struct answer
wrecv(struct worker *w)
{
  struct answer a;

  if(read(w->ans, &a, sizeof(a)) != sizeof(a)){
    memset(&a, 0, sizeof(a));
    a.r = -100;           // the worker died
  }
  return a;
}

static struct answer
wdo(struct worker *w, char op, int id, int cap, int status, char *text, int len)
{
  wsend(w, op, id, cap, status, text, len);
  return wrecv(w);
}

static void
wstop(struct worker *w)
{
  int status;

  wsend(w, 'x', 0, 0, 0, 0, 0);
  wait(&status);
  close(w->cmd);
  close(w->ans);
}

static void
wkill(struct worker *w)
{
  int status;

  kill(w->pid);
  wait(&status);
  close(w->cmd);
  close(w->ans);
}

static void
workers(void)
{
  struct worker w, w2;
  struct answer a;
  struct ai_status st;
  struct ai_stats s;
  uint32 t3[3] = { 7, 8, 9 };
  char ref[256];
  int id, id2, n, pid, status, fds[2];
  long free0 = freemem();

  name = "worker";
  need_model();
  ok("stats", ai_stats(&s));
  CHECK("no ai_daemon workers in this image", s.workers == 0);

  // worker_get's own argument checks (a registered child; the queue is
  // empty, and the checks come before any sleep)
  if((pid = fork()) == 0){
    static uint32 toks[AI_MAX_TOKENS];
    struct ai_work w;
    uint64 p, text = (uint64)workers;
    char *end = sbrk(0);

    nfail = 0;
    ok("register", ai_worker_register());
    ok("register again", ai_worker_register());
    BAD("worker_get cap -1", ai_worker_get(toks, -1, &w), AI_EINVAL);
    BAD("worker_get NULL tokens, cap 5", ai_worker_get(0, 5, &w), AI_EINVAL);
    BAD("worker_get NULL work", ai_worker_get(toks, 5, 0), AI_EINVAL);
    BAD("worker_get unaligned work", ai_worker_get(toks, 5, (struct ai_work *)(out + 2)),
        AI_EINVAL);
    BAD("worker_get tokens into text", ai_worker_get((uint32 *)(text & ~3UL), 5, &w),
        AI_EINVAL);
    BAD("worker_get tokens past the break", ai_worker_get((uint32 *)(end - 4), 5, &w),
        AI_EINVAL);
    for(int i = 0; (p = badaddr(i)) != 0; i++)
      BAD("worker_get bad work", ai_worker_get(toks, 5, (struct ai_work *)p), AI_EINVAL);
    BAD("worker_run unknown", ai_worker_run(9999), AI_EPERM);
    BAD("worker_complete unknown", ai_worker_complete(9999, 0, 0, -1), AI_EPERM);
    BAD("worker_complete bad text", ai_worker_complete(9999, (char *)MAXVA, 4, 0),
        AI_EINVAL);
    BAD("worker_complete len -1", ai_worker_complete(9999, "x", -1, 0), AI_EINVAL);
    exit(nfail ? 1 : 0);
  }
  wait(&status);
  CHECK("worker argument checks (child)", status == 0);
  ok("stats", ai_stats(&s));
  CHECK("the checking worker is gone", s.workers == 0);

  // requests queue up while there is no worker at all
  id = ok("submit without workers", submit(t3, 3, 3, 0));
  ok("query", ai_query(id, &st));
  CHECK("queued", st.state == AI_QUEUED && st.t_dispatch == 0);

  // the course's protocol: get, compute, complete
  wstart(&w);
  a = wdo(&w, 'g', 0, AI_MAX_TOKENS, 0, 0, 0);
  CHECK("get: the prompt's length", a.r == 3);
  CHECK("get: the request", a.w.reqid == id && a.w.ntokens == 3 && a.w.npredict == 3 &&
        a.w.owner == getpid());
  CHECK("get: the prompt", a.tokens[0] == 7 && a.tokens[1] == 8 && a.tokens[2] == 9);
  ok("query", ai_query(id, &st));
  CHECK("running, dispatched", st.state == AI_RUNNING && st.t_dispatch >= st.t_submit);
  a = wdo(&w, 'c', id, 0, 0, 0, -1);
  CHECK("complete with a bad text pointer", a.r == -1 && a.err == AI_EINVAL);
  ok("query", ai_query(id, &st));
  CHECK("still running after the bad complete", st.state == AI_RUNNING);
  a = wdo(&w, 'c', id, 0, 0, "11 22 33", 8);
  CHECK("complete", a.r == 0);
  a = wdo(&w, 'c', id, 0, 0, "11 22 33", 8);
  CHECK("second complete", a.r == -1 && a.err == AI_EPERM);
  ok("query", ai_query(id, &st));
  CHECK("done, 3 ids", st.state == AI_DONE && st.ngenerated == 3 && st.result_len == 8 &&
        st.t_done > 0);
  n = ok("wait", ai_wait(id, out, sizeof(out)));
  CHECK("the worker's text", n == 8 && strcmp(out, "11 22 33") == 0);

  // failure reports: NULL/0 with a status (the course's daemon was refused)
  id = ok("submit", submit(t3, 3, 3, 0));
  a = wdo(&w, 'g', 0, AI_MAX_TOKENS, 0, 0, 0);
  a = wdo(&w, 'c', id, 0, -1, 0, 0);
  CHECK("complete(NULL, 0, -1)", a.r == 0);
  BAD("wait: worker's failure", ai_wait(id, out, sizeof(out)), AI_EWORKER);
  BAD("reported once", ai_wait(id, out, sizeof(out)), AI_EPERM);
  id = ok("submit", submit(t3, 3, 3, 0));
  a = wdo(&w, 'g', 0, AI_MAX_TOKENS, 0, 0, 0);
  a = wdo(&w, 'c', id, 0, AI_ERANGE, 0, 0);
  BAD("wait: worker's AI_ERANGE", ai_wait(id, out, sizeof(out)), AI_ERANGE);

  // a token cap too small leaves the request queued
  id = ok("submit", submit(t3, 3, 8, 0));
  a = wdo(&w, 'g', 0, 2, 0, 0, 0);
  CHECK("get with cap 2 < 3", a.r == -1 && a.err == AI_ESMALL);
  ok("query", ai_query(id, &st));
  CHECK("still queued", st.state == AI_QUEUED);

  // the device path: get (no token copy), run
  a = wdo(&w, 'g', 0, -1, 0, 0, 0);
  CHECK("get(NULL, 0)", a.r == 3 && a.w.reqid == id);
  a = wdo(&w, 'r', id + 1000, 0, 0, 0, 0);
  CHECK("run of a request not taken", a.r == -1 && a.err == AI_EPERM);
  a = wdo(&w, 'r', id, 0, 0, 0, 0);
  CHECK("run", a.r == 0);
  a = wdo(&w, 'r', id, 0, 0, 0, 0);
  CHECK("run again", a.r == -1 && a.err == AI_EPERM);
  a = wdo(&w, 'c', id, 0, 0, "1", 1);
  CHECK("complete after run", a.r == -1 && a.err == AI_EPERM);
  n = ok("wait", ai_wait(id, ref, sizeof(ref)));
  CHECK("8 ids from the device", nwords(ref) == 8);
  id = ok("submit", submit(t3, 3, 8, 0));
  a = wdo(&w, 'g', 0, AI_MAX_TOKENS, 0, 0, 0);
  a = wdo(&w, 'r', id, 0, 0, 0, 0);
  ok("wait", ai_wait(id, out, sizeof(out)));
  CHECK("same prompt, same ids", strcmp(out, ref) == 0);

  // the device's own checks reach the owner through the worker
  uint32 big[1] = { info.vocab_size - 1 };
  id = ok("submit", submit(big, 1, 1, 0));
  a = wdo(&w, 'g', 0, -1, 0, 0, 0);
  a = wdo(&w, 'r', id, 0, 0, 0, 0);
  CHECK("run of the vocabulary's last id", a.r == 0);
  ok("wait", ai_wait(id, out, sizeof(out)));

  // a worker killed while the device runs its request: AI_EWORKER
  id = ok("submit long", submit(prompt, 5, longest(), 0));
  a = wdo(&w, 'g', 0, -1, 0, 0, 0);
  wsend(&w, 'r', id, 0, 0, 0, 0);
  CHECK("running on the device", until_running(id, &st) == 0);
  CHECK("far from done", st.ngenerated < longest() / 2);
  CHECK("worker asleep in worker_run", until_sleeping(w.pid) == 0);
  wkill(&w);
  BAD("wait: the worker died", ai_wait(id, out, sizeof(out)), AI_EWORKER);
  check_idle("after the worker died");

  // a worker killed while it waits for work; one that exits holding a request
  wstart(&w);
  wsend(&w, 'g', 0, -1, 0, 0, 0);
  CHECK("idle worker sleeps", until_sleeping(w.pid) == 0);
  ok("stats", ai_stats(&s));
  CHECK("one worker", s.workers == 1);
  wkill(&w);
  ok("stats", ai_stats(&s));
  CHECK("killed idle worker unregistered", s.workers == 0);
  id = ok("submit", submit(t3, 3, 2, 0));
  wstart(&w);
  a = wdo(&w, 'g', 0, -1, 0, 0, 0);
  wstop(&w);
  BAD("wait: worker exited holding it", ai_wait(id, out, sizeof(out)), AI_EWORKER);

  // queued requests outlive the worker and go to the next one
  id = ok("submit", submit(t3, 3, 8, 0));
  id2 = ok("submit", submit(t3, 3, 8, 0));
  wstart(&w2);
  for(int i = 0; i < 2; i++){
    a = wdo(&w2, 'g', 0, -1, 0, 0, 0);
    CHECK("the oldest first", a.w.reqid == (i == 0 ? id : id2));
    a = wdo(&w2, 'r', a.w.reqid, 0, 0, 0, 0);
    CHECK("run", a.r == 0);
  }
  ok("wait", ai_wait(id, out, sizeof(out)));
  CHECK("first queued result", strcmp(out, ref) == 0);
  ok("wait", ai_wait(id2, out, sizeof(out)));
  CHECK("second queued result", strcmp(out, ref) == 0);

  // orphans: the owner dies before the worker runs it, or while it runs
  for(int during = 0; during < 2; during++){
    int hold[2];
    pipe(fds);
    pipe(hold);
    if((pid = fork()) == 0){
      int cid = submit(prompt, 5, during ? longest() : 4, 0);
      write(fds[1], &cid, sizeof(cid));
      read(hold[0], &cid, sizeof(cid));     // blocks: nobody writes
      exit(0);
    }
    read(fds[0], &id, sizeof(id));
    a = wdo(&w2, 'g', 0, -1, 0, 0, 0);
    CHECK("worker took the client's request", a.w.reqid == id && a.w.owner == pid);
    if(during){
      wsend(&w2, 'r', id, 0, 0, 0, 0);
      CHECK("worker asleep in worker_run", until_sleeping(w2.pid) == 0);
    }
    CHECK("client blocked", until_sleeping(pid) == 0);
    kill(pid);
    wait(&status);
    if(!during)
      wsend(&w2, 'r', id, 0, 0, 0, 0);
    a = wrecv(&w2);
    if(during)
      CHECK("run of an orphan: cancelled (or just finished)",
            (a.r == -1 && a.err == AI_ECANCELED) || a.r == 0);
    else
      CHECK("run of an orphan: cancelled", a.r == -1 && a.err == AI_ECANCELED);
    close(fds[0]);
    close(fds[1]);
    close(hold[0]);
    close(hold[1]);
    check_idle("after the orphan");
  }

  // the worker table holds AI_MAX_WORKERS
  int kids[AI_MAX_WORKERS], hold[2];
  pipe(fds);
  pipe(hold);
  for(int i = 0; i < AI_MAX_WORKERS - 1; i++){
    if((kids[i] = fork()) == 0){
      char c;
      ai_worker_register();
      write(fds[1], "r", 1);
      read(hold[0], &c, 1);         // keep the registration: nobody writes
      exit(0);
    }
    char c;
    read(fds[0], &c, 1);
  }
  ok("stats", ai_stats(&s));
  CHECK("table full", s.workers == AI_MAX_WORKERS);
  BAD("register into a full table", ai_worker_register(), AI_EBUSY);
  for(int i = 0; i < AI_MAX_WORKERS - 1; i++)
    kill(kids[i]);
  for(int i = 0; i < AI_MAX_WORKERS - 1; i++)
    wait(&status);
  close(fds[0]);
  close(fds[1]);
  close(hold[0]);
  close(hold[1]);
  wstop(&w2);
  ok("stats", ai_stats(&s));
  CHECK("every worker unregistered", s.workers == 0);
  check_idle("at the end");
  CHECK("no page leaked", freemem() == free0);
  finish("%d checks", checks, 0);
}

// No model at boot; the test starts loading one when we ask, and holds
// the end of the load back until our submit sleeps (no ai_daemon).
static void
loading(void)
{
  struct ai_info i0;
  struct ai_work w;
  uint64 t0, t1;
  int id, n;

  name = "loading";
  ok("info", ai_info(&i0));
  CHECK("no model yet", i0.present == 1 && i0.state == AI_DEV_NOMODEL);
  BAD("submit without a model", submit(prompt, 5, 1, 0), AI_ENODEV);
  printf("aiktest loading: waiting for the load\n");
  for(int i = 0; i < 3000 && ai_info(&i0) == 0 && i0.state != AI_DEV_LOADING; i++)
    sleep(1);
  CHECK("loading", i0.state == AI_DEV_LOADING);
  BAD("AI_NONBLOCK while loading", submit(prompt, 5, 1, AI_NONBLOCK), AI_EBUSY);
  printf("aiktest loading: submitting\n");
  t0 = time_us();
  id = ok("submit sleeps until the model is ready", submit(prompt, 5, 1, 0));
  t1 = time_us();
  printf("aiktest loading: submit slept %d us\n", (int)(t1 - t0));
  ok("info", ai_info(&info));
  CHECK("ready now", info.state == AI_DEV_READY && info.vocab_size > 0 &&
        info.load_us > 0);
  // nobody else works here: serve it ourselves
  ok("register", ai_worker_register());
  n = ok("get", ai_worker_get(0, 0, &w));
  CHECK("get: ours", n == 5 && w.reqid == id);
  ok("run", ai_worker_run(id));
  ok("wait", ai_wait(id, out, sizeof(out)));
  CHECK("one id", nwords(out) == 1);
  finish("%d checks", checks, 0);
}

static void
nodev(void)
{
  struct ai_stats st;
  struct ai_status s;

  name = "nodev";
  BAD("info", ai_info(&info), AI_ENODEV);
  BAD("submit", submit(prompt, 5, 1, 0), AI_ENODEV);
  BAD("call", ai_call(prompt, 5, 1, out, sizeof(out)), AI_ENODEV);
  BAD("wait", ai_wait(1, out, sizeof(out)), AI_EPERM);
  BAD("query", ai_query(1, &s), AI_EPERM);
  ok("stats", ai_stats(&st));
  CHECK("stats: idle", st.slots[AI_FREE] == AI_NSLOT && st.submitted == 0 &&
        st.next_id == 1);
  CHECK("lasterr after success", ai_lasterr() == AI_OK);
  finish("%d checks", checks, 0);
}

int
main(int argc, char *argv[])
{
  brk0 = (uint64)sbrk(0);
  if(argc >= 2 && strcmp(argv[1], "sem") == 0)
    sem();
  if(argc >= 3 && strcmp(argv[1], "peek") == 0)
    peek(atoi(argv[2]));
  if(argc >= 2 && strcmp(argv[1], "args") == 0)
    args();
  if(argc >= 2 && strcmp(argv[1], "full") == 0)
    full();
  if(argc >= 2 && strcmp(argv[1], "killsubmit") == 0)
    killsubmit();
  if(argc >= 2 && strcmp(argv[1], "killwait") == 0)
    killwait();
  if(argc >= 2 && strcmp(argv[1], "exit") == 0)
    exitclient();
  if(argc >= 4 && strcmp(argv[1], "storm") == 0)
    storm(atoi(argv[2]), atoi(argv[3]));
  if(argc >= 2 && strcmp(argv[1], "worker") == 0)
    workers();
  if(argc >= 2 && strcmp(argv[1], "loading") == 0)
    loading();
  if(argc >= 2 && strcmp(argv[1], "nodev") == 0)
    nodev();
  fprintf(2, "usage: aiktest sem|args|full|killsubmit|killwait|exit|"
          "storm SEED N|worker|loading|nodev|peek ID\n");
  exit(2);
}
