// aireadtest: the semantics of ai_read (kernel_c/ai_service.c), one check
// per line "[aireadtest] NAME: PASS" or "... FAIL: why".
//
//   aireadtest [--predict N] [ids...]
//
// The rows of the course's semantics table with ai_read in place of
// ai_query, plus timeouts and kill/exit while reading:
//   stream      the owner reads before completion: ids come in pieces while
//               the request runs, and ai_wait still returns them all
//   done        after completion, before ai_wait: ai_read gives every id
//               again and consumes nothing
//   consumed    after ai_wait: ai_read fails (AI_EPERM)
//   fork-unauth a forked child's ai_read fails (AI_EPERM); its exit costs
//               the owner nothing
//   timeout     nothing new within the timeout: AI_ETIMEDOUT, request kept
//   badargs     cap 0, from < 0, unknown reqid
//   kill        a reader killed in its sleep exits before its request ends
//               (the request is then cancelled, no slot left behind)

#include "types.h"
#include "stat.h"
#include "user.h"

#define PREDICT_MAX 4000
#define RESULT_MAX  (PREDICT_MAX * 11)

static uint32 tokens[AI_MAX_TOKENS] = {1, 42, 314, 2718};
static int ntokens = 4, predict = 32, failures;
static uint32 got[PREDICT_MAX], again[PREDICT_MAX];
static char text[RESULT_MAX], formatted[RESULT_MAX];

static void
result(const char *check, const char *why)
{
  if(why){
    printf("[aireadtest] %s: FAIL: %s (%s)\n", check, why,
           ai_strerror(ai_lasterr()));
    failures++;
  } else {
    printf("[aireadtest] %s: PASS\n", check);
  }
}

// Do the ids equal the result text "id id id"?
static int
same(const uint32 *ids, int n, const char *t)
{
  if(ai_format_ids(formatted, sizeof(formatted), ids, n) < 0)
    return 0;
  return strcmp(formatted, t) == 0;
}

static const char*
check_stream(int *id)
{
  struct ai_status st;
  int n = 0, k, reads = 0, early = 0;

  if((*id = ai_submit(tokens, ntokens, predict)) < 0)
    return "ai_submit failed";
  // every read returns at least one new id, or 0 at the end
  while((k = ai_read(*id, got + n, n, n < predict ? predict - n : 1, -1)) > 0){
    n += k;
    reads++;
    if(ai_query(*id, &st) == 0 && st.state == AI_RUNNING)
      early++;
  }
  if(k < 0)
    return "ai_read failed";
  if(n != predict)
    return "not every id was read";
  printf("[aireadtest] stream: %d ids in %d reads, %d while running\n", n,
         reads, early);
  return 0;
}

static const char*
check_done(int id)
{
  struct ai_status st;
  int n;

  if(ai_query(id, &st) < 0 || st.state != AI_DONE)
    return "the request is not DONE after the end of the stream";
  if((n = ai_read(id, again, 0, PREDICT_MAX, 0)) != predict)
    return "ai_read after completion did not give every id";
  if(memcmp(again, got, n * sizeof(uint32)) != 0)
    return "ids read after completion differ from the streamed ones";
  if(ai_read(id, again, predict, 8, 0) != 0)
    return "reading past the end is not 0";
  if(ai_read(id, again, 3, 2, 0) != 2 || again[0] != got[3] || again[1] != got[4])
    return "ai_read from 3 is wrong";
  return 0;
}

static const char*
check_forkunauth(int id)
{
  int pid, status = -1;

  if((pid = fork()) < 0)
    return "fork failed";
  if(pid == 0)
    exit(ai_read(id, again, 0, 4, 0) >= 0 || ai_lasterr() != AI_EPERM);
  wait(&status);
  return status != 0 ? "a forked child's ai_read did not fail with AI_EPERM" : 0;
}

static const char*
check_consumed(int id)
{
  int len = ai_wait(id, text, sizeof(text));

  if(len < 0)
    return "ai_wait after ai_read failed";
  if(!same(got, predict, text))
    return "ai_wait's result differs from the ids ai_read gave";
  if(ai_read(id, again, 0, 4, 0) >= 0 || ai_lasterr() != AI_EPERM)
    return "ai_read after ai_wait did not fail with AI_EPERM";
  return 0;
}

static const char*
check_timeout(void)
{
  int id, n = 0, k;

  if((id = ai_submit(tokens, ntokens, predict)) < 0)
    return "ai_submit failed";
  // nothing will ever come past npredict + 1: the request ends first or
  // the 20 ms run out; either way nothing is lost
  k = ai_read(id, again, predict + 1, 4, 20);
  if(k != 0 && !(k < 0 && ai_lasterr() == AI_ETIMEDOUT))
    return "a read past the end neither timed out nor ended";
  if(ai_read(id, again, 0, 1, 0) < 0 && ai_lasterr() != AI_ETIMEDOUT)
    return "a non-sleeping read failed";
  while((k = ai_read(id, again + n, n, n < predict ? predict - n : 1, 5)) != 0){
    if(k < 0 && ai_lasterr() != AI_ETIMEDOUT)
      return "ai_read with a timeout failed";
    if(k > 0)
      n += k;
  }
  if(n != predict || ai_wait(id, text, sizeof(text)) < 0 ||
     !same(again, n, text))
    return "the request is not whole after timed-out reads";
  return 0;
}

static const char*
check_badargs(void)
{
  int id = ai_submit(tokens, ntokens, 2);

  if(id < 0)
    return "ai_submit failed";
  if(ai_read(id, again, 0, 0, 0) >= 0 || ai_lasterr() != AI_EINVAL)
    return "cap 0 accepted";
  if(ai_read(id, again, -1, 4, 0) >= 0 || ai_lasterr() != AI_EINVAL)
    return "from -1 accepted";
  if(ai_read(id, (uint32 *)0x10, 0, 4, 0) >= 0 || ai_lasterr() != AI_EINVAL)
    return "a bad buffer accepted";
  if(ai_read(999999, again, 0, 4, 0) >= 0 || ai_lasterr() != AI_EPERM)
    return "an unknown reqid accepted";
  if(ai_wait(id, text, sizeof(text)) < 0)
    return "the request was lost to bad reads";
  return 0;
}

static int
busy(void)
{
  struct ai_stats s;

  if(ai_stats(&s) < 0)
    return -1;
  return s.slots[AI_QUEUED] + s.slots[AI_RUNNING] + s.slots[AI_DONE] +
         s.slots[AI_FAILED];
}

static const char*
check_kill(void)
{
  struct ai_stats before, after;
  int pid, status = 0, p[2], b0 = busy(), i;
  char c;

  if(ai_stats(&before) < 0 || pipe(p) < 0)
    return "ai_stats or pipe failed";
  if((pid = fork()) < 0)
    return "fork failed";
  if(pid == 0){
    int id = ai_submit(tokens, ntokens, PREDICT_MAX);
    close(p[0]);
    write(p[1], id < 0 ? "n" : "y", 1);
    // sleeps until the very last id: only the kill ends it early
    ai_read(id, again, PREDICT_MAX - 1, 1, -1);
    exit(3);
  }
  close(p[1]);
  if(read(p[0], &c, 1) != 1 || c != 'y')
    return "the child could not submit";
  close(p[0]);
  sleep(5);
  kill(pid);
  wait(&status);
  if(ai_stats(&after) < 0)
    return "ai_stats failed";
  if(status != -1)
    return "the reader was not killed";
  if(after.completed != before.completed)
    return "the reader stayed until its request completed";
  // its request is cancelled on the device and its slot freed
  for(i = 0; i < 300 && busy() != b0; i++)
    sleep(1);
  return busy() != b0 ? "the killed reader's slot was not freed" : 0;
}

int
main(int argc, char *argv[])
{
  int i = 1, id, n = 0;

  if(i + 1 < argc && strcmp(argv[i], "--predict") == 0){
    predict = atoi(argv[i + 1]);
    i += 2;
  }
  if(predict < 5 || predict > PREDICT_MAX){
    printf("aireadtest: --predict must be 5..%d\n", PREDICT_MAX);
    exit(2);
  }
  for(; i < argc && n < AI_MAX_TOKENS; i++)
    if(ai_parse_u32(argv[i], &tokens[n++]) < 0){
      printf("aireadtest: bad token id %s\n", argv[i]);
      exit(2);
    }
  if(n)
    ntokens = n;

  const char *why = check_stream(&id);
  result("stream", why);
  if(!why){
    result("done", check_done(id));
    result("fork-unauth", check_forkunauth(id));
    result("consumed", check_consumed(id));
  }
  result("timeout", check_timeout());
  result("badargs", check_badargs());
  result("kill", check_kill());
  return failures ? 1 : 0;
}
