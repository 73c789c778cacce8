// sysai.c: the AI system calls (numbers in syscall.h, semantics in ai.h
// and ai_service.c). Here: fetching and checking the arguments, and the
// per-process "last AI error" that ai_lasterr() returns.
//
// Every AI call records its outcome for ai_lasterr(): AI_OK when it
// succeeds, the AI_E* reason when it returns -1.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "ai.h"
#include "defs.h"

extern struct proc proc[NPROC];

// by process table slot; pid tells whether the entry is this process's
// (a new process in the slot starts with AI_OK)
static struct {
  int pid;
  int err;
} lasterr[NPROC];

// Record r (>= 0, or -AI_E<code>) as the caller's last outcome; the
// system call's return value.
static uint64
outcome(int r)
{
  struct proc *p = myproc();
  int i = p - proc;

  lasterr[i].pid = p->pid;
  lasterr[i].err = r < 0 ? -r : AI_OK;
  return r < 0 ? -1 : r;
}

// Fetch the user's struct ai_submit_args at argument n into *a.
static int
argsubmit(int n, struct ai_submit_args *a)
{
  uint64 ua;

  if(argptr(n, &ua, sizeof(*a), sizeof(uint64), 0) < 0 ||
     copyin(myproc()->pagetable, (char *)a, ua, sizeof(*a)) < 0)
    return -1;
  return 0;
}

// Fetch an output buffer (argument n, cap bytes as argument ncap): cap
// must be positive and the whole buffer writable.
static int
argout(int n, int ncap, uint64 *out, int *cap)
{
  argint(ncap, cap);
  if(*cap <= 0)
    return -1;
  return argptr(n, out, *cap, 1, 1);
}

// int ai_submitx(struct ai_submit_args *a): queue a request; its id
uint64
sys_ai_submitx(void)
{
  struct ai_submit_args a;

  if(argsubmit(0, &a) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_submit(&a));
}

// int ai_wait(int reqid, char *out, int cap): the result text's length
uint64
sys_ai_wait(void)
{
  uint64 out;
  int id, cap;

  argint(0, &id);
  if(argout(1, 2, &out, &cap) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_wait(id, out, cap));
}

// int ai_query(int reqid, struct ai_status *st)
uint64
sys_ai_query(void)
{
  uint64 st;
  int id;

  argint(0, &id);
  if(argptr(1, &st, sizeof(struct ai_status), sizeof(uint64), 1) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_query(id, st));
}

// int ai_read(int reqid, uint32 *ids, int from, int cap, int timeout_ms):
// the ids generated from index `from` on (at most cap); 0 once the request
// has ended with nothing past `from`
uint64
sys_ai_read(void)
{
  uint64 ids;
  int id, from, cap, timeout;

  argint(0, &id);
  argint(2, &from);
  argint(3, &cap);
  argint(4, &timeout);
  if(from < 0 || cap <= 0 || cap > AI_MAX_PREDICT ||
     argptr(1, &ids, (uint64)cap * sizeof(uint32), sizeof(uint32), 1) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_read(id, ids, from, cap, timeout));
}

// int ai_call(const uint32 *tokens, int n, int predict, char *out, int cap):
// submit and wait with default settings; the result text's length
uint64
sys_ai_call(void)
{
  struct ai_submit_args a;
  uint64 out;
  int cap;

  memset(&a, 0, sizeof(a));
  argaddr(0, &a.tokens);
  argint(1, &a.ntokens);
  argint(2, &a.npredict);
  if(argout(3, 4, &out, &cap) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_call(&a, out, cap));
}

// int ai_worker_register(void)
uint64
sys_ai_worker_register(void)
{
  return outcome(ai_service_worker_register());
}

// int ai_worker_get(uint32 *tokens, int cap, struct ai_work *w): the
// prompt's length; tokens may be 0 (with cap 0) for a worker that lets
// the device run the request
uint64
sys_ai_worker_get(void)
{
  uint64 tokens, work;
  int cap;

  argaddr(0, &tokens);
  argint(1, &cap);
  if(cap < 0 || (tokens == 0 && cap != 0))
    return outcome(-AI_EINVAL);
  if(tokens != 0 &&
     argptr(0, &tokens, (uint64)cap * sizeof(uint32), sizeof(uint32), 1) < 0)
    return outcome(-AI_EINVAL);
  if(argptr(2, &work, sizeof(struct ai_work), sizeof(int), 1) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_worker_get(tokens, cap, work));
}

// int ai_worker_run(int reqid): 0 once the device computed it
uint64
sys_ai_worker_run(void)
{
  int id;

  argint(0, &id);
  return outcome(ai_service_worker_run(id));
}

// int ai_worker_complete(int reqid, const char *out, int len, int status):
// status 0 = out holds the result text; otherwise the request failed and
// out may be 0
uint64
sys_ai_worker_complete(void)
{
  uint64 out;
  int id, len, status;

  argint(0, &id);
  argaddr(1, &out);
  argint(2, &len);
  argint(3, &status);
  if(status == 0 && (len < 0 || argptr(1, &out, len, 1, 0) < 0))
    return outcome(-AI_EINVAL);
  return outcome(ai_service_worker_complete(id, out, len, status));
}

// int ai_info(struct ai_info *info): -1 (AI_ENODEV) without an AI device
uint64
sys_ai_info(void)
{
  uint64 info;

  if(argptr(0, &info, sizeof(struct ai_info), sizeof(uint64), 1) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_info(info));
}

// int ai_stats(struct ai_stats *st)
uint64
sys_ai_stats(void)
{
  uint64 st;

  if(argptr(0, &st, sizeof(struct ai_stats), sizeof(uint64), 1) < 0)
    return outcome(-AI_EINVAL);
  return outcome(ai_service_stats(st));
}

// int ai_lasterr(void): the outcome of the caller's last AI call (AI_OK or
// AI_E*); does not change it
uint64
sys_ai_lasterr(void)
{
  struct proc *p = myproc();
  int i = p - proc;

  return lasterr[i].pid == p->pid ? lasterr[i].err : AI_OK;
}
