// test_ai_slots.c: kernel_c/ai_slots.c (the AI service's slots, circular
// queue and request state machine) on the host. kalloc() is malloc'd pages
// here, each its own allocation, so AddressSanitizer sees a write past a
// page of result text, and a count of outstanding pages finds leaks.
//
// Besides the contract of each function, a random walk of many thousands
// of operations (claims, dispatches, completions, failures, waits, owner
// and worker exits) checks the invariants after every step: nfree equals
// the FREE slots, the queue holds exactly the QUEUED slots in submission
// order, live ids are unique and below next_id, FREE slots hold no text,
// and no page is held but by a DONE slot's text.

#include "hostk.h"
#include "ai.h"
#include "ai_slots.h"

static int pages_out;

void*
kalloc(void)
{
  void *p = aligned_alloc(AIS_PAGESZ, AIS_PAGESZ);

  if(p)
    pages_out++;
  return p;
}

void
kfree(void *p)
{
  CHECK(p != 0, "kfree(0)");
  pages_out--;
  free(p);
}

static struct aisvc sv;
static uint32 toks[AI_MAX_TOKENS];

static struct ai_submit_args
args(int n, int predict)
{
  struct ai_submit_args a;

  k_memset(&a, 0, sizeof(a));
  a.tokens = (uint64)toks;
  a.ntokens = n;
  a.npredict = predict;
  return a;
}

static int
npages(struct aislot *s)
{
  int n = 0;

  for(int i = 0; i < AIS_TEXTPAGES; i++)
    n += s->text[i] != 0;
  return n;
}

// Every invariant of struct aisvc; returns the number that failed.
static int
invariants(const char *when)
{
  int before = hk_fails, nfree = 0, nqueued = 0, held = 0;
  int seen[AI_NSLOT] = {0};

  for(int i = 0; i < AI_NSLOT; i++){
    struct aislot *s = &sv.slot[i];
    CHECK(s->state >= AI_FREE && s->state <= AI_FAILED, "%s: slot %d state %d", when, i, s->state);
    if(s->state == AI_FREE){
      nfree++;
      CHECK(s->id == 0 && npages(s) == 0 && s->chain == -1, "%s: FREE slot %d id %d pages %d",
            when, i, s->id, npages(s));
      continue;
    }
    CHECK(s->id > 0 && s->id < sv.next_id, "%s: slot %d id %d next %d", when, i, s->id, sv.next_id);
    for(int j = 0; j < i; j++)
      CHECK(sv.slot[j].state == AI_FREE || sv.slot[j].id != s->id, "%s: id %d twice", when, s->id);
    if(s->state == AI_QUEUED)
      nqueued++;
    if(s->state != AI_DONE)
      CHECK(npages(s) == 0, "%s: slot %d state %d holds %d text pages", when, i, s->state, npages(s));
    else
      CHECK(npages(s) == s->result_len / AIS_PAGESZ + 1, "%s: DONE slot %d len %d pages %d",
            when, i, s->result_len, npages(s));
    held += npages(s);
  }
  CHECK(nfree == sv.nfree, "%s: nfree %d, %d slots FREE", when, sv.nfree, nfree);
  CHECK(sv.queue.count == nqueued, "%s: queue count %d, %d QUEUED", when, sv.queue.count, nqueued);
  CHECK(sv.queue.head >= 0 && sv.queue.head < AI_NSLOT, "%s: queue head %d", when, sv.queue.head);
  int lastid = 0;
  for(int k = 0; k < sv.queue.count; k++){
    int i = sv.queue.ring[(sv.queue.head + k) % AI_NSLOT];
    CHECK(i >= 0 && i < AI_NSLOT, "%s: queue entry %d", when, i);
    if(i < 0 || i >= AI_NSLOT)
      continue;
    CHECK(!seen[i], "%s: slot %d queued twice", when, i);
    seen[i] = 1;
    CHECK(sv.slot[i].state == AI_QUEUED, "%s: queued slot %d is %d", when, i, sv.slot[i].state);
    CHECK(sv.slot[i].id > lastid, "%s: queue out of submission order", when);
    lastid = sv.slot[i].id;
  }
  CHECK(held == pages_out, "%s: %d pages out, slots hold %d", when, pages_out, held);
  return hk_fails - before;
}

// "id id id" the slow way, for comparing
static int
reference_text(char *buf, const uint32 *ids, int n)
{
  int len = 0;

  for(int i = 0; i < n; i++)
    len += sprintf(buf + len, i ? " %u" : "%u", ids[i]);
  return len;
}

static int
text_equals(struct aislot *s, const char *want, int len)
{
  int n;

  if(s->result_len != len)
    return 0;
  for(int off = 0; off <= len; off++){
    char *p = ais_text_at(s, off, &n);
    if(*p != (off == len ? 0 : want[off]))
      return 0;
  }
  return 1;
}

static void
contract(void)
{
  struct ai_submit_args a;
  struct aislot *s, *q[AI_NSLOT];
  struct ai_stats st;
  static uint32 ids[AI_MAX_PREDICT];
  static char want[AI_MAX_PREDICT * 11 + 16];

  ais_init(&sv);
  invariants("init");
  CHECK(sv.nfree == AI_NSLOT && sv.next_id == 1, "init");

  // argument checks, at their boundaries
  a = args(1, 1);    CHECK(ais_check_args(&a, 0) == AI_OK, "1 token 1 predict");
  a = args(0, 1);    CHECK(ais_check_args(&a, 0) == AI_EINVAL, "0 tokens");
  a = args(-1, 1);   CHECK(ais_check_args(&a, 0) == AI_EINVAL, "-1 tokens");
  a = args(AI_MAX_TOKENS, AI_MAX_PREDICT);
  CHECK(ais_check_args(&a, 0) == AI_OK, "max tokens, max predict");
  a = args(AI_MAX_TOKENS + 1, 1); CHECK(ais_check_args(&a, 0) == AI_EINVAL, "max+1 tokens");
  a = args(1, AI_MAX_PREDICT + 1); CHECK(ais_check_args(&a, 0) == AI_EINVAL, "max+1 predict");
  a = args(1, 0);    CHECK(ais_check_args(&a, 0) == AI_EINVAL, "0 predict");
  a = args(1, -5);   CHECK(ais_check_args(&a, 0) == AI_EINVAL, "negative predict");
  a = args(1, 1); a.flags = 8;  CHECK(ais_check_args(&a, 0) == AI_EINVAL, "unknown flag");
  a = args(1, 1); a.flags = AI_NO_SPEC; CHECK(ais_check_args(&a, 0) == AI_OK, "no speculation");
  a = args(1, 1); a.flags = -1; CHECK(ais_check_args(&a, 0) == AI_EINVAL, "all flags");
  a = args(1, 1); a.speculate = AI_MAX_SPECULATE + 1;
  CHECK(ais_check_args(&a, 1) == AI_EINVAL, "speculate past the limit");
  a = args(1, 1); a.speculate = AI_MAX_SPECULATE; CHECK(ais_check_args(&a, 1) == AI_OK, "speculate");
  a = args(1, 1); a.top_p_milli = 1001; CHECK(ais_check_args(&a, 1) == AI_EINVAL, "top_p");
  a = args(1, 1); a.temp_milli = 700;
  CHECK(ais_check_args(&a, 0) == AI_EINVAL, "sampling without a sampling device");
  CHECK(ais_check_args(&a, 1) == AI_OK, "sampling with one");
  a = args(1, 1); a.top_p_milli = 1000;
  CHECK(ais_check_args(&a, 0) == AI_OK, "top_p 1000 is off");

  // model checks: the sum must not wrap, ids below the vocabulary
  a = args(AI_MAX_TOKENS, AI_MAX_PREDICT);
  CHECK(ais_check_model(&a, toks, 100, AI_MAX_TOKENS + AI_MAX_PREDICT) == AI_OK, "fits exactly");
  CHECK(ais_check_model(&a, toks, 100, AI_MAX_TOKENS + AI_MAX_PREDICT - 1) == AI_ETOOLONG, "1 over");
  a = args(2, 1);
  toks[1] = 100;
  CHECK(ais_check_model(&a, toks, 100, 8) == AI_ERANGE, "id == vocab");
  toks[1] = 0xffffffff;
  CHECK(ais_check_model(&a, toks, 100, 8) == AI_ERANGE, "id 2^32-1");
  toks[1] = 99;
  CHECK(ais_check_model(&a, toks, 100, 8) == AI_OK, "id vocab-1");
  toks[1] = 0;

  // claim every slot: ids grow, the queue is FIFO, then it is full
  a = args(3, 5);
  for(int i = 0; i < AI_NSLOT; i++){
    q[i] = ais_claim(&sv, 10 + i, &a, toks, 1000 + i);
    CHECK(q[i] != 0 && q[i]->id == i + 1 && q[i]->state == AI_QUEUED, "claim %d", i);
  }
  CHECK(ais_claim(&sv, 99, &a, toks, 0) == 0, "claim with every slot taken");
  CHECK(sv.nfree == 0, "nfree %d when full", sv.nfree);
  invariants("full");

  // lookups: stale, zero, negative and foreign ids find nothing
  CHECK(ais_lookup(&sv, 0) == 0 && ais_lookup(&sv, -1) == 0, "id 0 / -1");
  CHECK(ais_lookup(&sv, AI_NSLOT + 1) == 0, "an id not handed out");
  CHECK(ais_owned(&sv, 1, 10) == q[0], "owner finds its request");
  CHECK(ais_owned(&sv, 1, 11) == 0, "another pid does not");
  CHECK(ais_owned(&sv, 1, 0) == 0 && ais_owned(&sv, 1, -1) == 0, "pid 0 / -1");

  // dispatch from the middle keeps the others in order
  ais_dispatch(&sv, q[3], 500, 2000);
  CHECK(q[3]->state == AI_RUNNING && q[3]->worker == 500, "dispatched");
  CHECK(ais_head(&sv) == q[0], "head still the oldest");
  invariants("dispatch from the middle");
  for(int i = 0; i < AI_NSLOT; i++)
    if(i != 3){
      CHECK(ais_head(&sv) == q[i], "head order at %d", i);
      ais_dispatch(&sv, ais_head(&sv), 500, 2000);
    }
  CHECK(ais_head(&sv) == 0, "queue empty");
  invariants("all running");

  // results: the largest text the service can hold, across page boundaries
  for(int i = 0; i < AI_MAX_PREDICT; i++)
    ids[i] = i % 3 == 0 ? 4294967295u : (uint32)hk_rand();
  q[0]->npredict = AI_MAX_PREDICT;
  CHECK(ais_finish_ids(q[0], ids, AI_MAX_PREDICT) == 0, "largest text");
  int len = reference_text(want, ids, AI_MAX_PREDICT);
  CHECK(len < AIS_TEXTMAX, "the largest text (%d) fits AIS_TEXTMAX (%d)", len, AIS_TEXTMAX);
  CHECK(text_equals(q[0], want, len), "largest text content");
  ais_done(&sv, q[0]);
  ids[0] = 0;
  CHECK(ais_finish_ids(q[1], ids, 1) == 0 && text_equals(q[1], "0", 1), "the id 0");
  ais_done(&sv, q[1]);
  invariants("results");

  // a text of len bytes needs len + 1 with its NUL: the limits
  CHECK(ais_text_alloc(q[2], AIS_TEXTMAX - 1) == 0, "text of AIS_TEXTMAX-1 bytes");
  ais_text_free(q[2]);
  CHECK(ais_text_alloc(q[2], AIS_TEXTMAX) < 0, "text of AIS_TEXTMAX bytes (no room for the NUL)");
  ais_text_free(q[2]);
  CHECK(ais_text_alloc(q[2], -1) < 0, "negative text length");
  CHECK(ais_text_alloc(q[2], 0) == 0 && q[2]->result_len == 0, "empty text");
  ais_text_free(q[2]);
  CHECK(pages_out == npages(q[0]) + npages(q[1]), "pages after the limits: %d", pages_out);

  // failing drops the text; a second finish replaces the first
  CHECK(ais_finish_ids(q[2], ids, 10) == 0, "finish");
  CHECK(ais_finish_ids(q[2], ids, 3) == 0, "finish again");
  ais_fail(&sv, q[2], AI_EDEVICE);
  CHECK(q[2]->state == AI_FAILED && q[2]->err == AI_EDEVICE && npages(q[2]) == 0, "failed");
  invariants("failed");

  // a worker exit fails its running requests, frees the orphans among them
  q[4]->owner = 0;
  uint failed = ais_worker_gone(&sv, 500);
  CHECK(failed != 0, "worker exit failed something");
  CHECK(q[4]->state == AI_FREE, "an orphan of a dead worker is freed");
  CHECK(q[5]->state == AI_FAILED && q[5]->err == AI_EWORKER, "a running request fails AI_EWORKER");
  CHECK(q[0]->state == AI_DONE, "a DONE request survives its worker");
  invariants("worker exit");

  // an owner exit frees QUEUED, DONE and FAILED, orphans RUNNING
  a = args(1, 1);
  s = ais_claim(&sv, 10, &a, toks, 0);
  CHECK(s != 0, "claim after frees");
  uint orphans = ais_owner_gone(&sv, 10);
  CHECK(orphans == 0, "owner 10 had nothing running");
  CHECK(q[0]->state == AI_FREE && s->state == AI_FREE, "owner 10's DONE and QUEUED freed");
  invariants("owner exit");

  ais_stats(&sv, &st);
  CHECK(st.slots[AI_FREE] == sv.nfree && st.queued == sv.queue.count, "stats");
  for(int i = 0; i < AI_NSLOT; i++)
    ais_free(&sv, &sv.slot[i]);
  CHECK(sv.nfree == AI_NSLOT && pages_out == 0, "all freed: nfree %d pages %d", sv.nfree, pages_out);

  // the worker table
  for(int i = 0; i < AI_MAX_WORKERS; i++)
    CHECK(ais_worker_add(&sv, 100 + i) == 0, "worker %d", i);
  CHECK(ais_worker_add(&sv, 100) == 0, "registering again is fine");
  CHECK(ais_worker_add(&sv, 999) < 0, "table full");
  CHECK(ais_nworkers(&sv) == AI_MAX_WORKERS, "nworkers");
  CHECK(!ais_is_worker(&sv, 0) && !ais_is_worker(&sv, -1), "pid 0 / -1 are not workers");
  ais_worker_gone(&sv, 100);
  CHECK(ais_worker_add(&sv, 999) == 0 && ais_is_worker(&sv, 999), "a freed entry is reused");
}

// The random walk: operations as the service makes them, invariants after each.
static void
walk(uint64 seed, int steps)
{
  struct ai_submit_args a;
  struct aislot *s;
  static uint32 ids[64];
  int workers[3] = { 501, 502, 503 };
  int lastid = 0;

  hk_seed(seed);
  ais_init(&sv);
  for(int i = 0; i < 3; i++)
    ais_worker_add(&sv, workers[i]);
  for(int step = 0; step < steps; step++){
    int op = hk_rand() % 9, pid = 1 + hk_rand() % 6;
    s = &sv.slot[hk_rand() % AI_NSLOT];
    switch(op){
    case 0: case 1:   // submit
      a = args(1 + hk_rand() % AI_MAX_TOKENS, 1 + hk_rand() % 64);
      s = ais_claim(&sv, pid, &a, toks, step);
      CHECK((s == 0) == (sv.nfree == 0 && s == 0), "claim");
      if(s){
        CHECK(s->id > lastid, "ids grow");
        lastid = s->id;
      }
      break;
    case 2:           // a worker takes the oldest
      if((s = ais_head(&sv)) != 0)
        ais_dispatch(&sv, s, workers[hk_rand() % 3], step);
      break;
    case 3:           // the device finishes a running request
      if(s->state == AI_RUNNING){
        int n = hk_rand() % 64;
        for(int i = 0; i < n; i++)
          ids[i] = (uint32)hk_rand() >> (hk_rand() % 32);
        if(ais_finish_ids(s, ids, n) == 0)
          ais_done(&sv, s);
        else
          ais_fail(&sv, s, AI_EDEVICE);
        if(s->owner == 0)
          ais_free(&sv, s);
      }
      break;
    case 4:           // ... or fails it
      if(s->state == AI_RUNNING){
        ais_fail(&sv, s, 1 + hk_rand() % AI_ECANCELED);
        if(s->owner == 0)
          ais_free(&sv, s);
      }
      break;
    case 5:           // the owner's wait consumes a finished request
      if((s->state == AI_DONE || s->state == AI_FAILED) && ais_owned(&sv, s->id, s->owner) == s)
        ais_free(&sv, s);
      break;
    case 6:           // an owner exits
      ais_owner_gone(&sv, pid);
      break;
    case 7:           // a worker exits (and is registered again: the daemon restarts it)
      if(hk_rand() % 4 == 0){
        int w = hk_rand() % 3;
        ais_worker_gone(&sv, workers[w]);
        CHECK(ais_worker_add(&sv, workers[w]) == 0, "re-register");
      }
      break;
    case 8:           // lookups never find what is not live
      CHECK(ais_lookup(&sv, lastid + 1 + hk_rand() % 5) == 0, "a future id");
      if(s->state != AI_FREE)
        CHECK(ais_lookup(&sv, s->id) == s, "a live id");
      break;
    }
    if(invariants("walk")){
      printf("  (seed %lu, step %d, op %d)\n", seed, step, op);
      return;
    }
  }
  for(int i = 0; i < AI_NSLOT; i++)
    ais_free(&sv, &sv.slot[i]);
  CHECK(pages_out == 0, "pages left after the walk: %d", pages_out);
}

int
main(int argc, char **argv)
{
  int seeds = argc > 1 ? atoi(argv[1]) : 20;

  contract();
  for(int seed = 1; seed <= seeds; seed++)
    walk(seed, 20000);
  return hk_done("ai_slots");
}
