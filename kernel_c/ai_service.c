// ai_service.c: the kernel's AI service: request slots and a circular
// queue (ai_slots.c) behind one lock, the sleeps and wakeups around them,
// the system calls' work (sysai.c fetches their arguments), and the clean-up
// when a process exits.
//
//   client: ai_submit -> slot QUEUED -> ... -> ai_wait copies the result
//           out and frees the slot (once)
//   worker (ai_daemon): ai_worker_get takes the oldest QUEUED request
//           (RUNNING), ai_worker_run has the device (virtio_ai.c) compute
//           it, marks it DONE or FAILED and wakes its owner; or the worker
//           computes it itself and reports with ai_worker_complete
//
// Blocking points, each a sleep(chan, &ai_lock) in a loop that re-checks
// its condition and ends with AI_EKILLED when the process is killed:
//
//   who         where                 until                  chan           woken by
//   worker      ai_worker_get         a request is queued    &ai.sv.queue   submit
//   client      submit                a slot is free         &ai.sv.nfree   any slot freed
//   client      submit                the model has loaded   &ai.loading    config interrupt
//   client      ai_wait               its request finished   the slot       worker_run, worker_complete, worker exit
//   client      ai_read               new ids, or the end    &slot->ngenerated  progress interrupt (asked for while it sleeps), the end (as ai_wait), timeout tick
//   worker      ai_worker_run         a device chain free    &ai.chainpool  a chain freed
//   worker      ai_worker_run         the device finished    &slot->chain   the device interrupt
//
// A slot never leaks: an exiting owner's QUEUED, DONE and FAILED requests
// are freed and its RUNNING ones orphaned (cancelled on the device, freed
// when they finish); an exiting worker's RUNNING requests FAIL with
// AI_EWORKER (its owner learns it at ai_wait) while QUEUED ones wait for
// the next worker.
//
// Every function returns a result >= 0 or -AI_E<code>; sysai.c turns that
// into -1 and the caller's ai_lasterr().

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "ai.h"
#include "virtio_ai.h"
#include "ai_slots.h"
#include "defs.h"

_Static_assert(AIS_PAGESZ == PGSIZE, "ai_slots.h: AIS_PAGESZ must be PGSIZE");

struct spinlock ai_lock;        // the slots, the queue and the device rings

static struct {
  struct aisvc sv;
  char loading;                 // chan: submitters waiting for the model
  char chainpool;               // chan: workers waiting for a device chain
} ai;

static void ai_exit(struct proc *);

void
ai_service_init(void)
{
  initlock(&ai_lock, "ai");
  ais_init(&ai.sv);
  exithook_register(ai_exit);
  virtio_ai_init();
}

// ----------------------------------------------------------------- helpers

// Free slot s (any state) and let a blocked submitter have it.
static void
reclaim(struct aislot *s, int event)
{
  virtio_ai_trace(event, s->id);
  ais_free(&ai.sv, s);
  wakeup(&ai.sv.nfree);
}

// The device's completion status as an AI_E* code.
static int
devstatus(uint32 st)
{
  switch(st){
  case AI_ST_OK:        return AI_OK;
  case AI_ST_ERANGE:    return AI_ERANGE;
  case AI_ST_ETOOLONG:  return AI_ETOOLONG;
  case AI_ST_ENOMODEL:  return AI_ENODEV;
  case AI_ST_ECANCELED: return AI_ECANCELED;
  case AI_ST_ENET:      return AI_ENET;
  case AI_ST_ESLOW:     return AI_ESLOW;
  case AI_ST_EPROTO:    return AI_EPROTO;
  case AI_ST_EBUSY:     return AI_EOVERLOAD;
  default:              return AI_EDEVICE;   // malformed, engine, fault, unknown
  }
}

// Request s has ended (DONE or FAILED): wake its owner, in ai_wait or
// ai_read.
static void
tell_owner(struct aislot *s)
{
  wakeup(s);
  wakeup(&s->ngenerated);
}

// Running request s came back from the device (its chain is no longer
// busy): record the result, give the chain back, mark it DONE or FAILED
// and tell its owner (or free it if the owner has gone). Returns AI_OK or
// the request's error.
static int
finish(struct aislot *s)
{
  struct ai_dev_resp *r = virtio_ai_resp(s->chain);
  int n = r->ngenerated, err = devstatus(r->status);

  if(n < 0 || n > s->npredict)
    n = s->npredict;
  s->t_accept = r->t_accept;
  s->t_first = r->t_first;
  s->t_done = r->t_done ? r->t_done : time_us();
  if(err == AI_OK && ais_finish_ids(s, virtio_ai_out(s->chain), n) < 0)
    err = AI_EDEVICE;   // no memory for the result text
  s->ngenerated = n;
  s->ncached = r->ncached <= (uint32)s->ntokens ? r->ncached : 0;
  s->nsteps = n > 0 && r->nsteps < (uint32)n ? r->nsteps : (n > 0 ? n - 1 : 0);
  virtio_ai_release(s->chain);
  s->chain = -1;
  wakeup(&ai.chainpool);

  if(err == AI_OK){
    ais_done(&ai.sv, s);
    virtio_ai_trace(AI_TR_COMPLETE, s->id);
  } else {
    ais_fail(&ai.sv, s, err);
    virtio_ai_trace(AI_TR_FAILED, s->id);
  }
  if(s->owner == 0)
    reclaim(s, AI_TR_FREED);
  else
    tell_owner(s);
  return err;
}

// ------------------------------------------------- called by the driver

// The device's model changed state (loaded, failed, switched).
void
ai_model_changed(void)
{
  wakeup(&ai.loading);
}

// The device returned the chain of the request in slot i.
void
ai_chain_done(int i)
{
  wakeup(&ai.sv.slot[i].chain);
}

// The device wrote more ids of the request in slot i (the progress
// interrupt, at most one per VIRTIO_AI_PROGRESS_US).
void
ai_progress(int i)
{
  wakeup(&ai.sv.slot[i].ngenerated);
}

// A chain nobody waited for is free again.
void
ai_chain_freed(void)
{
  wakeup(&ai.chainpool);
}

// ----------------------------------------------------------- clients

// Queue a request (a is the caller's arguments, a->tokens still a user
// address). Sleeps while the model is loading or every slot is taken,
// unless AI_NONBLOCK. Returns the request id.
int
ai_service_submit(struct ai_submit_args *a)
{
  struct proc *p = myproc();
  uint32 tokens[AI_MAX_TOKENS];
  struct virtio_ai_config *m;
  struct aislot *s;
  int err, id, refreshed = 0;
  uint64 now = time_us();       // t_submit: the request entered the kernel

  if(!virtio_ai_present())
    return -AI_ENODEV;
  if((err = ais_check_args(a, virtio_ai_sampling())) != AI_OK)
    return -err;
  if(a->tokens % sizeof(uint32) != 0 ||
     copyin(p->pagetable, (char *)tokens, a->tokens,
            a->ntokens * sizeof(uint32)) < 0)
    return -AI_EINVAL;

  acquire(&ai_lock);
  for(;;){
    m = virtio_ai_model(0);
    if(m->state == AI_DEV_LOADING && !refreshed){
      // not yet told otherwise: ask the device once before sleeping
      m = virtio_ai_model(1);
      refreshed = 1;
    }
    if(m->state == AI_DEV_LOADING){
      err = (a->flags & AI_NONBLOCK) ? AI_EBUSY : killed(p) ? AI_EKILLED : 0;
      if(err)
        goto out;
      sleep(&ai.loading, &ai_lock);
      continue;
    }
    if(m->state != AI_DEV_READY){
      err = AI_ENODEV;
      goto out;
    }
    // checked again after every sleep: the model may have changed
    if((err = ais_check_model(a, tokens, m->vocab_size, m->max_context)) != AI_OK)
      goto out;
    if((s = ais_claim(&ai.sv, p->pid, a, tokens, now)) != 0)
      break;
    err = (a->flags & AI_NONBLOCK) ? AI_EBUSY : killed(p) ? AI_EKILLED : 0;
    if(err)
      goto out;
    sleep(&ai.sv.nfree, &ai_lock);
  }
  id = s->id;
  virtio_ai_trace(AI_TR_SUBMIT, id);
  wakeone(&ai.sv.queue);   // one worker per request (it takes it or passes it on)
  release(&ai_lock);
  return id;

out:
  release(&ai_lock);
  return -err;
}

// Wait for request id to finish and copy its result text (with the NUL)
// to user address out (cap bytes, already checked). Only the submitter may
// wait, and only once: the slot is freed when the result has been copied
// out, or when its failure has been reported. A cap too small for the
// result fails with AI_ESMALL and keeps it. Returns the text's length.
int
ai_service_wait(int id, uint64 out, int cap)
{
  struct proc *p = myproc();
  struct aislot *s;
  int off, n, len, err;
  char *src;

  acquire(&ai_lock);
  for(;;){
    if((s = ais_owned(&ai.sv, id, p->pid)) == 0){
      err = AI_EPERM;
      goto bad;
    }
    if(s->state == AI_DONE || s->state == AI_FAILED)
      break;
    if(killed(p)){
      err = AI_EKILLED;
      goto bad;
    }
    sleep(s, &ai_lock);
  }
  if(s->state == AI_FAILED){
    err = s->err;
    reclaim(s, AI_TR_WAITED);
    goto bad;
  }
  len = s->result_len;
  if(cap < len + 1){
    err = AI_ESMALL;
    goto bad;
  }
  // copyout() does not sleep, so the lock may stay held
  for(off = 0; off < len + 1; off += n){
    src = ais_text_at(s, off, &n);
    if(n > len + 1 - off)
      n = len + 1 - off;
    if(copyout(p->pagetable, out + off, src, n) < 0){
      err = AI_EINVAL;   // the result stays for another try
      goto bad;
    }
  }
  reclaim(s, AI_TR_WAITED);
  release(&ai_lock);
  return len;

bad:
  release(&ai_lock);
  return -err;
}

// A snapshot of request id (submitter only) to user address st. Never
// sleeps and never consumes the result.
int
ai_service_query(int id, uint64 st)
{
  struct proc *p = myproc();
  struct aislot *s;
  struct ai_status status;

  acquire(&ai_lock);
  if((s = ais_owned(&ai.sv, id, p->pid)) == 0){
    release(&ai_lock);
    return -AI_EPERM;
  }
  ais_status(s, &status);
  if(s->state == AI_RUNNING && s->chain >= 0)
    virtio_ai_progress(s->chain, &status.ngenerated, &status.t_accept,
                       &status.t_first);
  release(&ai_lock);
  if(copyout(p->pagetable, st, (char *)&status, sizeof(status)) < 0)
    return -AI_EINVAL;
  return 0;
}

// Copy the ids of finished request s from index `from` on (at most cap)
// to user address uids, a piece at a time. Returns how many, or -1.
static int
copy_text_ids(struct aislot *s, uint64 uids, int from, int cap)
{
  uint32 buf[32];
  int pos = 0, k, n = 0;

  while(n < cap){
    k = ais_text_ids(s, &pos, n == 0 ? from : 0, buf,
                     cap - n < 32 ? cap - n : 32);
    if(k == 0)
      break;
    if(copyout(myproc()->pagetable, uids + n * sizeof(uint32), (char *)buf,
               k * sizeof(uint32)) < 0)
      return -1;
    n += k;
  }
  return n;
}

// The ids request id (submitter only) has generated from index `from` on,
// at most cap of them, to user address uids (checked). Sleeps while there
// is nothing past `from` and the request has not ended: until the device's
// progress interrupt brings more, the request ends, timeout_ms passes
// (AI_ETIMEDOUT; 0 = never sleep, < 0 = no timeout) or the caller is
// killed (AI_EKILLED). Returns how many ids it copied; 0 means the request
// has ended (DONE or FAILED: ai_wait tells which) with no ids past `from`.
// Never consumes the request: ai_wait still returns the whole result.
int
ai_service_read(int id, uint64 uids, int from, int cap, int timeout_ms)
{
  struct proc *p = myproc();
  struct aislot *s;
  uint64 ta, tf;
  uint at = 0;
  int n = 0, ngen, err = AI_OK, wake = -1, want = 0;

  if(timeout_ms > 0)
    at = uptime() + (timeout_ms * (uint64)TICK_HZ + 999) / 1000;
  acquire(&ai_lock);
  for(;;){
    if((s = ais_owned(&ai.sv, id, p->pid)) == 0){
      err = AI_EPERM;
      break;
    }
    if(s->state == AI_DONE){
      if((n = copy_text_ids(s, uids, from, cap)) < 0)
        err = AI_EINVAL;
      break;
    }
    if(s->state == AI_FAILED)
      break;    // n = 0: ended
    if(s->state == AI_RUNNING && s->chain >= 0){
      virtio_ai_progress(s->chain, &ngen, &ta, &tf);
      if(ngen > s->npredict)
        ngen = s->npredict;
      if(ngen > from){
        n = ngen - from < cap ? ngen - from : cap;
        // copyout() does not sleep, so the lock may stay held
        if(copyout(p->pagetable, uids,
                   (char *)(virtio_ai_out(s->chain) + from),
                   n * sizeof(uint32)) < 0)
          err = AI_EINVAL;
        break;
      }
    }
    if(timeout_ms == 0 || (timeout_ms > 0 && (int)(uptime() - at) >= 0)){
      err = AI_ETIMEDOUT;
      break;
    }
    if(killed(p)){
      err = AI_EKILLED;
      break;
    }
    if(!want){
      // ask for progress interrupts, then look once more before sleeping
      virtio_ai_want_progress(1);
      want = 1;
      continue;
    }
    if(timeout_ms > 0 && wake < 0)
      wake = timer_wake_at(at, &s->ngenerated);
    sleep(&s->ngenerated, &ai_lock);
  }
  if(want)
    virtio_ai_want_progress(-1);
  if(err == AI_OK && n > 0 && from + n > s->nread){
    if(s->nread == 0)
      virtio_ai_trace(AI_TR_READ, id);
    s->nread = from + n;
  }
  release(&ai_lock);
  if(wake >= 0)
    timer_wake_cancel(wake);
  return err == AI_OK ? n : -err;
}

// ai_submit + ai_wait. The caller never learns the id, so a result it
// cannot take (AI_ESMALL, a bad buffer) is dropped rather than kept.
int
ai_service_call(struct ai_submit_args *a, uint64 out, int cap)
{
  struct aislot *s;
  int id, r;

  if((id = ai_service_submit(a)) < 0)
    return id;
  r = ai_service_wait(id, out, cap);
  if(r < 0 && r != -AI_EKILLED){
    acquire(&ai_lock);
    s = ais_owned(&ai.sv, id, myproc()->pid);
    if(s && s->state == AI_DONE)
      reclaim(s, AI_TR_FREED);
    release(&ai_lock);
  }
  return r;
}

// -------------------------------------------------------------- workers

// Make the caller a worker (again is fine).
int
ai_service_worker_register(void)
{
  int r;

  acquire(&ai_lock);
  r = ais_worker_add(&ai.sv, myproc()->pid);
  release(&ai_lock);
  return r < 0 ? -AI_EBUSY : 0;
}

// Take the oldest queued request, sleeping while there is none: its
// description goes to user address work, its prompt to user address
// tokens (cap ids) unless tokens is 0. Both were checked. A cap smaller
// than the prompt fails with AI_ESMALL and leaves the request queued.
// Returns the prompt's length.
int
ai_service_worker_get(uint64 tokens, int cap, uint64 work)
{
  struct proc *p = myproc();
  struct aislot *s;
  struct ai_work w;
  int err;

  acquire(&ai_lock);
  if(!ais_is_worker(&ai.sv, p->pid)){
    err = AI_EPERM;
    goto bad;
  }
  while((s = ais_head(&ai.sv)) == 0){
    if(killed(p)){
      err = AI_EKILLED;
      goto bad;
    }
    sleep(&ai.sv.queue, &ai_lock);
  }
  if(tokens != 0 && s->ntokens > cap){
    err = AI_ESMALL;
    goto bad;
  }
  w.reqid = s->id;
  w.ntokens = s->ntokens;
  w.npredict = s->npredict;
  w.owner = s->owner;
  // copy first, take it off the queue after: a failed copy loses nothing
  if((tokens != 0 && copyout(p->pagetable, tokens, (char *)s->tokens,
                             s->ntokens * sizeof(uint32)) < 0) ||
     copyout(p->pagetable, work, (char *)&w, sizeof(w)) < 0){
    err = AI_EINVAL;
    goto bad;
  }
  ais_dispatch(&ai.sv, s, p->pid, time_us());
  virtio_ai_trace(AI_TR_DISPATCH, s->id);
  release(&ai_lock);
  return w.ntokens;

bad:
  // submit woke only this worker: a request it leaves queued goes to another
  if(ais_head(&ai.sv) != 0)
    wakeone(&ai.sv.queue);
  release(&ai_lock);
  return -err;
}

// The request id the caller took and is running, or 0.
static struct aislot*
running(int id, int pid)
{
  struct aislot *s = ais_lookup(&ai.sv, id);

  if(s == 0 || s->state != AI_RUNNING || s->worker != pid)
    return 0;
  return s;
}

// Have the device compute request id, which the caller took with
// ai_worker_get: start it, sleep until the device returns it, then mark it
// DONE or FAILED and wake its owner. Returns 0 if it is DONE, or the
// request's error (the request FAILED; the owner is told too). If the
// owner has exited meanwhile, the request is cancelled and freed
// (AI_ECANCELED). A killed worker returns AI_EKILLED at once; its exit
// fails the request with AI_EWORKER.
int
ai_service_worker_run(int id)
{
  struct proc *p = myproc();
  struct aislot *s;
  int c, err;

  acquire(&ai_lock);
  if((s = running(id, p->pid)) == 0){
    err = AI_EPERM;
    goto bad;
  }
  if(s->chain >= 0){
    err = AI_EINVAL;    // already on the device
    goto bad;
  }
  if(!virtio_ai_present()){
    err = AI_ENODEV;
    goto bad;
  }
  for(;;){
    if(s->owner == 0){
      // nobody wants it any more
      reclaim(s, AI_TR_FREED);
      err = AI_ECANCELED;
      goto bad;
    }
    if((c = virtio_ai_start(s, ais_index(&ai.sv, s))) >= 0)
      break;
    if(killed(p)){
      err = AI_EKILLED;
      goto bad;
    }
    sleep(&ai.chainpool, &ai_lock);
  }
  s->chain = c;
  while(virtio_ai_busy(c)){
    if(killed(p)){
      err = AI_EKILLED;
      goto bad;
    }
    sleep(&s->chain, &ai_lock);
  }
  err = finish(s);
  release(&ai_lock);
  return err == AI_OK ? 0 : -err;

bad:
  release(&ai_lock);
  return -err;
}

// count the words (ids) of a result text
static int
nwords(struct aislot *s)
{
  int off, n, k, words = 0, inword = 0;
  char *p;

  for(off = 0; off < s->result_len; off += n){
    p = ais_text_at(s, off, &n);
    if(n > s->result_len - off)
      n = s->result_len - off;
    for(k = 0; k < n; k++){
      if(p[k] == ' ' || p[k] == '\n' || p[k] == '\t'){
        inword = 0;
      } else if(!inword){
        inword = 1;
        words++;
      }
    }
  }
  return words;
}

// The course's worker protocol: the worker computed request id itself.
// status 0: the result is len bytes of text at user address out (checked);
// anything else: the request failed (out and len are ignored; a status
// that is an AI_E* code becomes its error, any other AI_EWORKER). If its
// owner has exited the request is just freed.
int
ai_service_worker_complete(int id, uint64 out, int len, int status)
{
  struct proc *p = myproc();
  struct aislot *s;
  int off, n, err;
  char *dst;

  acquire(&ai_lock);
  if((s = running(id, p->pid)) == 0){
    err = AI_EPERM;
    goto bad;
  }
  if(s->chain >= 0){
    err = AI_EINVAL;    // the device is computing it
    goto bad;
  }
  if(status == 0){
    if(len < 0 || len >= AIS_TEXTMAX){   // the text and its NUL must fit
      err = AI_EINVAL;
      goto bad;
    }
    if(ais_text_alloc(s, len) < 0){
      err = AI_EDEVICE;   // out of memory; the request is unchanged
      goto bad;
    }
    for(off = 0; off < len; off += n){
      dst = ais_text_at(s, off, &n);
      if(n > len - off)
        n = len - off;
      if(copyin(p->pagetable, dst, out + off, n) < 0){
        ais_text_free(s);
        err = AI_EINVAL;
        goto bad;
      }
    }
    s->ngenerated = nwords(s);
    s->t_done = time_us();
    ais_done(&ai.sv, s);
    virtio_ai_trace(AI_TR_COMPLETE, s->id);
  } else {
    s->t_done = time_us();
    ais_fail(&ai.sv, s, status > 0 && status <= AI_ECANCELED ? status : AI_EWORKER);
    virtio_ai_trace(AI_TR_FAILED, s->id);
  }
  if(s->owner == 0)
    reclaim(s, AI_TR_FREED);
  else
    tell_owner(s);
  release(&ai_lock);
  return 0;

bad:
  release(&ai_lock);
  return -err;
}

// ---------------------------------------------------------- information

// The device and its model to user address uinfo.
int
ai_service_info(uint64 uinfo)
{
  struct virtio_ai_config *m;
  struct ai_info info;

  if(!virtio_ai_present())
    return -AI_ENODEV;
  memset(&info, 0, sizeof(info));
  acquire(&ai_lock);
  m = virtio_ai_model(1);
  info.present = 1;
  info.state = m->state;
  info.vocab_size = m->vocab_size;
  info.max_context = m->max_context;
  info.eos_token = m->eos_token;
  info.flags = m->flags;
  info.n_params = m->n_params;
  info.weight_bytes = m->weight_bytes;
  info.load_us = m->load_us;
  info.repack_us = m->repack_us;
  memmove(info.name, m->name, sizeof(info.name));
  memmove(info.arch, m->arch, sizeof(info.arch));
  info.workers = ais_nworkers(&ai.sv);
  info.kv_block = m->kv_block;
  info.kv_cache_bytes = m->kv_cache_bytes;
  virtio_ai_cache(&info.cache);
  release(&ai_lock);
  if(copyout(myproc()->pagetable, uinfo, (char *)&info, sizeof(info)) < 0)
    return -AI_EINVAL;
  return 0;
}

// Service counters and the registered workers' pids to user address
// ustats (works without a device).
int
ai_service_stats(uint64 ustats)
{
  struct ai_stats st;

  acquire(&ai_lock);
  ais_stats(&ai.sv, &st);
  release(&ai_lock);
  if(copyout(myproc()->pagetable, ustats, (char *)&st, sizeof(st)) < 0)
    return -AI_EINVAL;
  return 0;
}

// --------------------------------------------------------------- exit

// Exit hook: process p leaves; no slot may stay behind for it.
static void
ai_exit(struct proc *p)
{
  struct aislot *s;
  uint failed, orphans;
  int i, nfree;

  acquire(&ai_lock);
  nfree = ai.sv.nfree;

  // as a worker: a request the device has already returned is finished
  // as usual; the others fail, and their chains are abandoned (cancelled
  // on the device, freed when it returns them)
  for(s = ai.sv.slot; s < &ai.sv.slot[AI_NSLOT]; s++){
    if(s->state != AI_RUNNING || s->worker != p->pid)
      continue;
    if(s->chain >= 0 && !virtio_ai_busy(s->chain)){
      finish(s);
      continue;
    }
    if(s->chain >= 0){
      virtio_ai_abandon(s->chain);
      s->chain = -1;
    }
    s->t_done = time_us();
    virtio_ai_trace(AI_TR_FAILED, s->id);
    if(s->owner == 0)
      virtio_ai_trace(AI_TR_FREED, s->id);
  }
  failed = ais_worker_gone(&ai.sv, p->pid);
  for(i = 0; i < AI_NSLOT; i++)
    if(failed & (1u << i))
      tell_owner(&ai.sv.slot[i]);

  // as an owner: nothing it submitted outlives it
  for(s = ai.sv.slot; s < &ai.sv.slot[AI_NSLOT]; s++)
    if(s->state != AI_FREE && s->state != AI_RUNNING && s->owner == p->pid)
      virtio_ai_trace(AI_TR_FREED, s->id);
  orphans = ais_owner_gone(&ai.sv, p->pid);
  for(i = 0; i < AI_NSLOT; i++)
    if((orphans & (1u << i)) && ai.sv.slot[i].chain >= 0)
      virtio_ai_cancel(ai.sv.slot[i].chain);

  // only if a slot was freed: most exits never touched the AI service, and
  // a wakeup() scans the whole process table
  if(ai.sv.nfree > nfree)
    wakeup(&ai.sv.nfree);
  release(&ai_lock);
}
