// ai_slots.c: request slots, the circular queue and the request state
// machine of the AI service, with no locks, no sleeping and no hardware
// (ai_service.c calls these with its lock held; a host test can compile
// this file alone).
//
//   FREE --claim--> QUEUED --dispatch--> RUNNING --done--> DONE --free--> FREE
//                     |                     |--fail--> FAILED --free--> FREE
//                     '--free (owner exit)  '--orphan (owner exit): freed
//                                              when it finishes
//
// A request id is handed out once (next_id only grows), so a stale id can
// never name a newer request.

#include "types.h"
#include "ai.h"
#include "ai_slots.h"

void
ais_init(struct aisvc *sv)
{
  int i;

  memset(sv, 0, sizeof(*sv));
  for(i = 0; i < AI_NSLOT; i++){
    sv->slot[i].state = AI_FREE;
    sv->slot[i].chain = -1;
  }
  sv->nfree = AI_NSLOT;
  sv->next_id = 1;
}

// Check what ai_submitx() was given, before anything is copied or taken:
// counts, flags, sampling parameters (which need a device that samples).
// Returns AI_OK or AI_EINVAL.
int
ais_check_args(const struct ai_submit_args *a, int sampling)
{
  if(a->ntokens < 1 || a->ntokens > AI_MAX_TOKENS)
    return AI_EINVAL;
  if(a->npredict < 1 || a->npredict > AI_MAX_PREDICT)
    return AI_EINVAL;
  if(a->flags & ~(AI_NONBLOCK | AI_STOP_EOS | AI_NO_SPEC))
    return AI_EINVAL;
  if(a->speculate > AI_MAX_SPECULATE || a->top_p_milli > 1000)
    return AI_EINVAL;
  if(!sampling && (a->temp_milli != 0 || a->top_k != 0 ||
                   (a->top_p_milli != 0 && a->top_p_milli != 1000)))
    return AI_EINVAL;
  return AI_OK;
}

// Check a request against the loaded model, in the course's order: the
// whole request must fit the context, every token id the vocabulary.
// Returns AI_OK, AI_ETOOLONG or AI_ERANGE.
int
ais_check_model(const struct ai_submit_args *a, const uint32 *tokens,
                uint32 vocab, uint32 ctx)
{
  int i;

  if((uint64)a->ntokens + (uint64)a->npredict > ctx)
    return AI_ETOOLONG;
  for(i = 0; i < a->ntokens; i++)
    if(tokens[i] >= vocab)
      return AI_ERANGE;
  return AI_OK;
}

int
ais_index(const struct aisvc *sv, const struct aislot *s)
{
  return s - sv->slot;
}

// Append slot index i to the queue (there is always room: the queue holds
// only QUEUED slots).
static void
q_push(struct aiqueue *q, int i)
{
  q->ring[(q->head + q->count) % AI_NSLOT] = i;
  q->count++;
}

// Take slot index i out of the queue wherever it is, keeping the order of
// the others. Returns 0, or -1 if it is not queued.
static int
q_remove(struct aiqueue *q, int i)
{
  int k, at = -1;

  for(k = 0; k < q->count; k++)
    if(q->ring[(q->head + k) % AI_NSLOT] == i)
      at = k;
  if(at < 0)
    return -1;
  if(at == 0){
    q->head = (q->head + 1) % AI_NSLOT;
  } else {
    // close the gap: shift the younger entries one place toward the head
    for(k = at; k < q->count - 1; k++)
      q->ring[(q->head + k) % AI_NSLOT] = q->ring[(q->head + k + 1) % AI_NSLOT];
  }
  q->count--;
  return 0;
}

// Take a FREE slot for a checked request of process owner and queue it.
// Returns the slot, or 0 if every slot is taken.
struct aislot*
ais_claim(struct aisvc *sv, int owner, const struct ai_submit_args *a,
          const uint32 *tokens, uint64 now)
{
  struct aislot *s;

  for(s = sv->slot; s < &sv->slot[AI_NSLOT]; s++)
    if(s->state == AI_FREE)
      goto found;
  return 0;

found:
  s->id = sv->next_id++;
  s->state = AI_QUEUED;
  s->err = AI_OK;
  s->owner = owner;
  s->worker = 0;
  s->chain = -1;
  s->ntokens = a->ntokens;
  s->npredict = a->npredict;
  s->flags = a->flags & (AI_STOP_EOS | AI_NO_SPEC);
  s->speculate = a->speculate;
  s->seed = a->seed;
  s->temp_milli = a->temp_milli;
  s->top_k = a->top_k;
  s->top_p_milli = a->top_p_milli;
  memmove(s->tokens, tokens, a->ntokens * sizeof(uint32));
  s->ngenerated = 0;
  s->nread = 0;
  s->ncached = 0;
  s->nsteps = 0;
  s->result_len = 0;
  s->t_submit = now;
  s->t_dispatch = s->t_accept = s->t_first = s->t_done = 0;
  q_push(&sv->queue, ais_index(sv, s));
  sv->nfree--;
  sv->submitted++;
  return s;
}

// The live (not FREE) request with this id, or 0.
struct aislot*
ais_lookup(struct aisvc *sv, int id)
{
  struct aislot *s;

  if(id <= 0)
    return 0;
  for(s = sv->slot; s < &sv->slot[AI_NSLOT]; s++)
    if(s->state != AI_FREE && s->id == id)
      return s;
  return 0;
}

// The request with this id if process pid submitted it, else 0: knowing
// an id is not permission to use it.
struct aislot*
ais_owned(struct aisvc *sv, int id, int pid)
{
  struct aislot *s = ais_lookup(sv, id);

  if(s == 0 || pid <= 0 || s->owner != pid)
    return 0;
  return s;
}

// The oldest QUEUED request, or 0 if the queue is empty.
struct aislot*
ais_head(struct aisvc *sv)
{
  if(sv->queue.count == 0)
    return 0;
  return &sv->slot[sv->queue.ring[sv->queue.head]];
}

// Worker pid takes QUEUED request s off the queue: it is RUNNING.
void
ais_dispatch(struct aisvc *sv, struct aislot *s, int worker, uint64 now)
{
  q_remove(&sv->queue, ais_index(sv, s));
  s->state = AI_RUNNING;
  s->worker = worker;
  s->t_dispatch = now;
}

// Drop the result text of s.
void
ais_text_free(struct aislot *s)
{
  int i;

  for(i = 0; i < AIS_TEXTPAGES; i++){
    if(s->text[i])
      kfree(s->text[i]);
    s->text[i] = 0;
  }
  s->result_len = 0;
}

// Give s room for a result of len bytes plus its NUL (written here).
// Returns 0, or -1 (nothing kept) if len is too big or memory is short.
// AIS_TEXTMAX counts the NUL, so len < AIS_TEXTMAX (a len of AIS_TEXTMAX
// would need one page more than text[] has).
int
ais_text_alloc(struct aislot *s, int len)
{
  int i, npages;

  ais_text_free(s);
  if(len < 0 || len >= AIS_TEXTMAX)
    return -1;
  npages = len / AIS_PAGESZ + 1;
  for(i = 0; i < npages; i++){
    if((s->text[i] = kalloc()) == 0){
      ais_text_free(s);
      return -1;
    }
  }
  s->result_len = len;
  s->text[len / AIS_PAGESZ][len % AIS_PAGESZ] = 0;
  return 0;
}

// Where byte off of the result text is; *n = bytes from there to the end
// of its page. For copying the text in and out a page at a time.
char*
ais_text_at(struct aislot *s, int off, int *n)
{
  *n = AIS_PAGESZ - off % AIS_PAGESZ;
  return s->text[off / AIS_PAGESZ] + off % AIS_PAGESZ;
}

static int
ndigits(uint32 v)
{
  int n = 1;

  while(v >= 10){
    v /= 10;
    n++;
  }
  return n;
}

// Make the n generated ids the result text of s, "id id id" as in the
// course. Returns 0, or -1 if there is no memory for it (s unchanged but
// without text).
int
ais_finish_ids(struct aislot *s, const uint32 *ids, int n)
{
  int i, k, len = 0, off = 0, room;
  char digits[10], *p;
  uint32 v;

  for(i = 0; i < n; i++)
    len += ndigits(ids[i]) + (i > 0);
  if(ais_text_alloc(s, len) < 0)
    return -1;
  for(i = 0; i < n; i++){
    // digits come out least significant first
    k = 0;
    v = ids[i];
    do {
      digits[k++] = '0' + v % 10;
      v /= 10;
    } while(v);
    if(i > 0){
      p = ais_text_at(s, off++, &room);
      *p = ' ';
    }
    while(k > 0){
      p = ais_text_at(s, off++, &room);
      *p = digits[--k];
    }
  }
  s->ngenerated = n;
  return 0;
}

// Read ids back from the result text of s ("id id id"), for ai_read of a
// finished request: from byte *pos on, skip `skip` ids, then store up to
// cap in ids[]; *pos moves past what was read, so a caller can go on in
// pieces. A word that is not a decimal number ends the ids (a course
// worker's text need not be ids). Returns the ids stored.
int
ais_text_ids(struct aislot *s, int *pos, int skip, uint32 *ids, int cap)
{
  int n = 0, room, digits;
  uint32 v;
  char c;

  while(n < cap && *pos < s->result_len){
    c = *ais_text_at(s, *pos, &room);
    if(c == ' ' || c == '\n' || c == '\t'){
      (*pos)++;
      continue;
    }
    v = 0;
    digits = 0;
    while(*pos < s->result_len){
      c = *ais_text_at(s, *pos, &room);
      if(c < '0' || c > '9')
        break;
      v = v * 10 + (c - '0');
      digits++;
      (*pos)++;
    }
    if(digits == 0 || (*pos < s->result_len && c != ' ' && c != '\n' && c != '\t')){
      *pos = s->result_len;   // not ids
      break;
    }
    if(skip > 0)
      skip--;
    else
      ids[n++] = v;
  }
  return n;
}

// Request s finished with its result text in place.
void
ais_done(struct aisvc *sv, struct aislot *s)
{
  s->state = AI_DONE;
  s->err = AI_OK;
  sv->completed++;
}

// Request s failed with error err; it keeps no result.
void
ais_fail(struct aisvc *sv, struct aislot *s, int err)
{
  ais_text_free(s);
  s->state = AI_FAILED;
  s->err = err;
  sv->failed++;
}

// Reclaim slot s whatever its state (out of the queue if QUEUED).
void
ais_free(struct aisvc *sv, struct aislot *s)
{
  if(s->state == AI_FREE)
    return;
  if(s->state == AI_QUEUED)
    q_remove(&sv->queue, ais_index(sv, s));
  ais_text_free(s);
  s->state = AI_FREE;
  s->id = 0;
  s->err = AI_OK;
  s->owner = 0;
  s->worker = 0;
  s->chain = -1;
  sv->nfree++;
}

// Process pid exited: free its QUEUED, DONE and FAILED requests; its
// RUNNING ones become orphans (owner 0), freed when they finish. Returns
// the mask (bit i = slot i) of those orphans, for cancelling on the device.
uint
ais_owner_gone(struct aisvc *sv, int pid)
{
  struct aislot *s;
  uint orphans = 0;

  if(pid <= 0)
    return 0;
  for(s = sv->slot; s < &sv->slot[AI_NSLOT]; s++){
    if(s->state == AI_FREE || s->owner != pid)
      continue;
    if(s->state == AI_RUNNING){
      s->owner = 0;
      orphans |= 1u << ais_index(sv, s);
    } else {
      ais_free(sv, s);
    }
  }
  return orphans;
}

// Worker pid exited: it is no longer registered, and every request it was
// running FAILS with AI_EWORKER (orphans among them are freed). QUEUED
// requests stay for the next worker. The caller detaches device chains
// first. Returns the mask of the requests failed, whose owners to wake.
uint
ais_worker_gone(struct aisvc *sv, int pid)
{
  struct aislot *s;
  uint failed = 0;
  int i;

  if(pid <= 0)
    return 0;
  for(i = 0; i < AI_MAX_WORKERS; i++)
    if(sv->workers[i] == pid)
      sv->workers[i] = 0;
  for(s = sv->slot; s < &sv->slot[AI_NSLOT]; s++){
    if(s->state != AI_RUNNING || s->worker != pid)
      continue;
    s->chain = -1;
    ais_fail(sv, s, AI_EWORKER);
    failed |= 1u << ais_index(sv, s);
    if(s->owner == 0)
      ais_free(sv, s);
  }
  return failed;
}

// Register pid as a worker (again is fine). Returns 0, or -1 if the table
// is full.
int
ais_worker_add(struct aisvc *sv, int pid)
{
  int i;

  if(ais_is_worker(sv, pid))
    return 0;
  for(i = 0; i < AI_MAX_WORKERS; i++){
    if(sv->workers[i] == 0){
      sv->workers[i] = pid;
      return 0;
    }
  }
  return -1;
}

int
ais_is_worker(struct aisvc *sv, int pid)
{
  int i;

  if(pid <= 0)
    return 0;
  for(i = 0; i < AI_MAX_WORKERS; i++)
    if(sv->workers[i] == pid)
      return 1;
  return 0;
}

int
ais_nworkers(struct aisvc *sv)
{
  int i, n = 0;

  for(i = 0; i < AI_MAX_WORKERS; i++)
    if(sv->workers[i])
      n++;
  return n;
}

// Snapshot of request s for ai_query (the caller adds live device
// progress while it runs).
void
ais_status(const struct aislot *s, struct ai_status *st)
{
  memset(st, 0, sizeof(*st));
  st->reqid = s->id;
  st->state = s->state;
  st->err = s->err;
  st->ntokens = s->ntokens;
  st->npredict = s->npredict;
  st->ngenerated = s->ngenerated;
  st->ncached = s->ncached;
  st->nsteps = s->nsteps;
  st->result_len = s->state == AI_DONE ? s->result_len : 0;
  st->owner = s->owner;
  st->t_submit = s->t_submit;
  st->t_dispatch = s->t_dispatch;
  st->t_accept = s->t_accept;
  st->t_first = s->t_first;
  st->t_done = s->t_done;
}

void
ais_stats(const struct aisvc *sv, struct ai_stats *st)
{
  const struct aislot *s;
  int i;

  memset(st, 0, sizeof(*st));
  for(s = sv->slot; s < &sv->slot[AI_NSLOT]; s++){
    st->slots[s->state]++;
    if(s->state == AI_RUNNING && s->owner == 0)
      st->orphans++;
  }
  st->queued = sv->queue.count;
  for(i = 0; i < AI_MAX_WORKERS; i++){
    st->worker_pid[i] = sv->workers[i];
    if(sv->workers[i])
      st->workers++;
  }
  st->submitted = sv->submitted;
  st->completed = sv->completed;
  st->failed = sv->failed;
  st->next_id = sv->next_id;
}
