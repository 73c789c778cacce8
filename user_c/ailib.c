// ailib.c: the user side of the AI service beyond the raw system calls:
// ai_submit with defaults, a wait that also reports the request's
// timestamps, error and state names, and token-id parsing/formatting.
// Linked into the AI programs (llmrun, aitest, aibench, ai_daemon, init).

#include "types.h"
#include "user.h"

// ai_submit(tokens, n, predict): greedy, blocking while every slot is
// taken, exactly `npredict` tokens (no early stop at end-of-sequence): the
// course's three-argument call over ai_submitx. Returns the request id.
int
ai_submit(const uint32 *tokens, int ntokens, int npredict)
{
  struct ai_submit_args a;

  memset(&a, 0, sizeof(a));
  a.tokens = (uint64)tokens;
  a.ntokens = ntokens;
  a.npredict = npredict;
  return ai_submitx(&a);
}

// Waits for request `reqid` like ai_wait, and also fills *st with its
// final status (timestamps, tokens generated), which a plain ai_wait cannot
// give: the slot is gone once the result is consumed. It sleeps in ai_wait
// with a 1-byte buffer, which fails with AI_ESMALL once the request is done
// and keeps the result; then ai_query snapshots the finished request and a
// second ai_wait consumes it. Returns the result length, or -1 (the
// request's own error, e.g. AI_EDEVICE, is in ai_lasterr(); a failed
// request is freed by that first wait, as with ai_wait).
int
ai_wait_status(int reqid, char *out, int out_cap, struct ai_status *st)
{
  char probe[1];

  if(ai_wait(reqid, probe, sizeof(probe)) >= 0){
    // only an empty result fits in one byte; nothing left to query
    memset(st, 0, sizeof(*st));
    st->reqid = reqid;
    st->state = AI_DONE;
    if(out_cap > 0)
      out[0] = 0;
    return 0;
  }
  if(ai_lasterr() != AI_ESMALL)
    return -1;
  if(ai_query(reqid, st) < 0)
    return -1;
  return ai_wait(reqid, out, out_cap);
}

static const char *errnames[] = {
  [AI_OK]        "no error",
  [AI_EINVAL]    "bad argument",
  [AI_ERANGE]    "token id out of the model's vocabulary",
  [AI_ETOOLONG]  "prompt + predict exceed the model's context",
  [AI_ENODEV]    "no AI device or no model loaded",
  [AI_EBUSY]     "every request slot is taken",
  [AI_EPERM]     "no such request of this process",
  [AI_ESMALL]    "result buffer too small (result kept)",
  [AI_EWORKER]   "the worker died while running the request",
  [AI_EDEVICE]   "the AI device failed the request",
  [AI_EKILLED]   "killed while waiting",
  [AI_ECANCELED] "cancelled",
  [AI_ETIMEDOUT] "nothing new within the timeout",
  [AI_ENET]      "the inference server cannot be reached",
  [AI_ESLOW]     "the inference server did not answer in time",
  [AI_EPROTO]    "the inference server's answer was garbled",
  [AI_EOVERLOAD] "the inference server is overloaded",
};

const char *
ai_strerror(int err)
{
  if(err >= 0 && err < sizeof(errnames) / sizeof(errnames[0]) && errnames[err])
    return errnames[err];
  return "unknown error";
}

static const char *statenames[] = AI_STATE_NAMES;

const char *
ai_statename(int state)
{
  if(state >= 0 && state < sizeof(statenames) / sizeof(statenames[0]))
    return statenames[state];
  return "?";
}

// The course's names for the two model families (its `expected %s assets,
// got %s` message), from the device's architecture string.
const char *
ai_family(const char *arch)
{
  if(strcmp(arch, "llama") == 0)
    return "SmolLM";
  if(strncmp(arch, "qwen3_5", 7) == 0)
    return "Qwen3.5";
  return "unknown-model";
}

// A whole word of decimal digits that fits in 32 bits -> *v, returns 0;
// anything else (sign, letters, empty, overflow) returns -1.
int
ai_parse_u32(const char *word, uint32 *v)
{
  uint64 x = 0;

  if(*word == 0)
    return -1;
  for(; *word; word++){
    if(!isdigit(*word))
      return -1;
    x = x * 10 + (*word - '0');
    if(x > 0xffffffffUL)
      return -1;
  }
  *v = x;
  return 0;
}

// "id id id" into buf (NUL-terminated). Returns the length, or -1 if it
// does not fit in cap bytes.
int
ai_format_ids(char *buf, int cap, const uint32 *ids, int n)
{
  int len = 0;

  if(cap < 1)
    return -1;
  buf[0] = 0;
  for(int i = 0; i < n; i++){
    int w = snprintf(buf + len, cap - len, i ? " %u" : "%u", ids[i]);
    if(w >= cap - len){
      buf[len] = 0;
      return -1;
    }
    len += w;
  }
  return len;
}

// The id parser reads blanks (space, tab, CR, LF) and decimal digits and
// can be fed a file block by block. It stops at the first error and
// remembers it with its byte offset.
void
ai_ids_init(struct ai_idparser *p, uint32 *ids, int max)
{
  memset(p, 0, sizeof(*p));
  p->ids = ids;
  p->max = max;
}

static int
endid(struct ai_idparser *p)
{
  p->indigit = 0;
  if(p->n >= p->max){
    p->err = AI_IDS_TOOMANY;
    p->errpos = p->pos;
    return -1;
  }
  p->ids[p->n++] = p->cur;
  p->cur = 0;
  return 0;
}

// Returns 0, or the first error (AI_IDS_*; later calls keep returning it).
int
ai_ids_feed(struct ai_idparser *p, const char *buf, int len)
{
  for(int i = 0; i < len && p->err == 0; i++, p->pos++){
    char c = buf[i];
    if(c >= '0' && c <= '9'){
      p->indigit = 1;
      p->cur = p->cur * 10 + (c - '0');
      if(p->cur > 0xffffffffUL){
        p->err = AI_IDS_OVERFLOW;
        p->errpos = p->pos;
      }
    } else if(c == ' ' || c == '\t' || c == '\r' || c == '\n'){
      if(p->indigit)
        endid(p);
    } else {
      p->err = AI_IDS_BADCHAR;
      p->errpos = p->pos;
    }
  }
  return p->err;
}

int
ai_ids_end(struct ai_idparser *p)
{
  if(p->err == 0 && p->indigit)
    endid(p);
  return p->err ? p->err : p->n;
}
