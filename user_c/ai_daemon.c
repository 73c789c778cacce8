// ai_daemon: the resident worker of the AI service (init starts it).
//
//   ai_daemon [-w N] [--ready-fd FD]
//
// The process init starts is a supervisor: it waits until the AI device's
// model is READY (ai_info), starts N worker processes (default AI_NSLOT) as
// /ai_worker (this same program under a second name, so that ps tells them
// apart), waits until each has registered with the kernel
// (ai_worker_register), then writes '1' to FD and closes it (init's ready
// pipe; init reads one byte and prints "[init] ai_daemon ready (pid=P)").
// After that it only restarts workers that exit.
//
// Why AI_NSLOT workers by default: a worker carries one request at a time
// from ai_worker_get to the device, so the workers bound the requests the
// device can batch. With 2 workers, 8 clients (aibench -c 8 -n 4 -p 16
// -g 32, SmolLM2) got 97 tok/s and a mean TTFT of 1.9 s (all queueing);
// with 8, 205 tok/s and 0.12 s. More workers than slots would only sleep.
//
// A worker loops: ai_worker_get (sleeps while the queue is empty) ->
// validate the request -> ai_worker_run (the kernel hands it to the device
// and sleeps until the device finishes it; the owner is then woken). Unlike
// the course's daemon, which exited on its own errors (and lost the loaded
// model), a worker reports any error and keeps going; the kernel fails the
// request concerned.
//
// When the supervisor is killed its workers become orphans (ai_worker
// processes whose parent is init) and stay registered; the next ai_daemon
// first retires them (kill), so a restart always leaves exactly N workers. A request running on a
// retired worker fails with AI_EWORKER; queued ones wait for the new
// workers. Both supervisor and workers ignore the console's ^C.

#include "types.h"
#include "param.h"
#include "procinfo.h"
#include "virtio_ai.h"
#include "user.h"

#define NAME            "ai_daemon"
#define WORKER          "ai_worker"     // the workers' program name
#define POLL_TICKS      2       // model-state poll while the device loads
#define QUICK_EXIT_US   1000000 // a worker exit this soon after start: crash

static struct ai_info info;
static int nworkers = AI_NSLOT;
static int wpid[AI_MAX_WORKERS];        // worker pids (0 = none)
static uint64 wstart[AI_MAX_WORKERS];   // time_us() at fork

static void
logmsg(const char *fmt, ...)
{
  char msg[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(2, "[" NAME "] %s\n", msg);
}

static void
errmsg(const char *fmt, ...)
{
  char msg[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(2, NAME ": %s\n", msg);
}

static void
usage(void)
{
  fprintf(2, "usage: ai_daemon [-w N] [--ready-fd FD]\n"
             "  -w N           worker processes, 1..%d (default %d)\n"
             "  --ready-fd FD  write '1' to FD once the model is ready and the\n"
             "                 workers are registered (init's ready pipe)\n",
          AI_MAX_WORKERS, AI_NSLOT);
}

// ------------------------------------------------------------------ worker

// The request checks the course's daemon made, with its texts (into why);
// the kernel has checked them at submit too. Returns 0 or an AI_E* code.
static int
validate(struct ai_work *w, int n, uint32 *tokens, char *why, int cap)
{
  if(n != w->ntokens || n < 1 || n > AI_MAX_TOKENS){
    snprintf(why, cap, "invalid token count %d", n);
    return AI_EINVAL;
  }
  if(w->npredict < 1 || w->npredict > AI_MAX_PREDICT){
    snprintf(why, cap, "invalid predict count %d", w->npredict);
    return AI_EINVAL;
  }
  if(n + w->npredict > info.max_context){
    snprintf(why, cap, "request too long for runtime_seq_len");
    return AI_ETOOLONG;
  }
  for(int i = 0; i < n; i++){
    if(tokens[i] >= info.vocab_size){
      snprintf(why, cap, "token %d out of vocabulary range", i);
      return AI_ERANGE;
    }
  }
  return 0;
}

// A worker's whole life. regfd: write '1' there once registered.
static void __attribute__((noreturn))
worker(int regfd)
{
  static uint32 tokens[AI_MAX_TOKENS];
  struct ai_work w;
  int fails = 0;

  ignintr(1);
  if(ai_worker_register() < 0){
    int err = ai_lasterr();
    errmsg("ai_worker_register failed: %s", err == AI_EBUSY ?
           "the kernel's worker table is full" : ai_strerror(err));
    exit(1);
  }
  if(regfd >= 0){
    write(regfd, "1", 1);
    close(regfd);
  }
  for(;;){
    // errors are reported and survived; a run of them slows the loop down
    // so that a persistent one cannot spin the CPU
    if(fails > 2)
      sleep(fails > 10 ? 100 : 10);
    int n = ai_worker_get(tokens, AI_MAX_TOKENS, &w);
    if(n < 0){
      int err = ai_lasterr();
      errmsg("ai_worker_get failed: %s", ai_strerror(err));
      fails++;
      if(err == AI_EPERM && ai_worker_register() < 0)
        errmsg("ai_worker_register failed: %s", ai_strerror(ai_lasterr()));
      continue;
    }
    char why[64];
    int err = validate(&w, n, tokens, why, sizeof(why));
    if(err != 0 && ai_info(&info) == 0)       // the model may have changed
      err = validate(&w, n, tokens, why, sizeof(why));
    if(err != 0){
      errmsg("request %d: %s", w.reqid, why);
      if(ai_worker_complete(w.reqid, 0, 0, err) < 0){
        errmsg("ai_worker_complete %d failed: %s", w.reqid,
               ai_strerror(ai_lasterr()));
        fails++;
      }
      continue;
    }
    if(ai_worker_run(w.reqid) < 0){
      // Most errors are the request's (the device failed it, its owner
      // exited): the kernel has marked it and told the owner. Only these
      // are the worker's own and worth a report.
      err = ai_lasterr();
      if(err == AI_EPERM || err == AI_ENODEV || err == AI_EKILLED ||
         err == AI_EINVAL){
        errmsg("ai_worker_run %d failed: %s", w.reqid, ai_strerror(err));
        fails++;
        continue;
      }
    }
    fails = 0;
  }
}

// Starts worker i: fork, then exec /ai_worker --reg-fd FD. Returns its
// pid or -1.
static int
start_worker(int i, int regfd, int readyfd, int regread)
{
  int pid = fork();

  if(pid == 0){
    char fd[12];
    char *argv[] = { WORKER, "--reg-fd", fd, 0 };
    if(readyfd >= 0)
      close(readyfd);     // only the supervisor answers init
    if(regread >= 0)
      close(regread);
    snprintf(fd, sizeof(fd), "%d", regfd);
    exec("/" WORKER, argv);
    errmsg("exec /" WORKER " failed; the worker runs as " NAME);
    worker(regfd);
  }
  if(pid < 0)
    errmsg("fork failed for worker %d", i);
  wpid[i] = pid > 0 ? pid : 0;
  wstart[i] = time_us();
  return pid;
}

// ------------------------------------------------------------------ supervisor

// Waits for the device's model to be READY. Exits if there is none.
static void
wait_model(void)
{
  int said = 0;

  for(;;){
    if(ai_info(&info) < 0 || !info.present){
      errmsg("no AI device");
      exit(1);
    }
    if(info.state == AI_DEV_READY)
      return;
    if(info.state == AI_DEV_FAILED){
      errmsg("the AI device failed to load its model");
      exit(1);
    }
    if(info.state != AI_DEV_LOADING){
      errmsg("no model loaded (boot with: harness run --model smol)");
      exit(1);
    }
    if(!said++)
      logmsg("waiting for the AI device to load its model");
    sleep(POLL_TICKS);
  }
}

// Exits, in one line, if another ai_daemon is running: the kernel's
// registered workers (ai_stats) whose parent is a live ai_daemon belong to
// it. Also when the worker table has no room for ours (any process may
// register): the workers would fail one by one.
static void
refuse_second_daemon(void)
{
  static struct procinfo rows[NPROC];
  struct ai_stats st;
  int n = procinfo(rows, NPROC), me = getpid(), daemon = 0, others = 0;

  if(ai_stats(&st) < 0){
    errmsg("ai_stats failed: %s", ai_strerror(ai_lasterr()));
    exit(1);
  }
  for(int w = 0; w < AI_MAX_WORKERS; w++){
    if(st.worker_pid[w] == 0)
      continue;
    others++;
    for(int i = 0; i < n; i++){
      if(rows[i].pid != st.worker_pid[w] || rows[i].ppid == me)
        continue;
      for(int j = 0; j < n; j++)
        if(rows[j].pid == rows[i].ppid && rows[j].state != PS_ZOMBIE &&
           strcmp(rows[j].name, NAME) == 0)
          daemon = rows[j].pid;
    }
  }
  if(daemon){
    errmsg("already running (pid %d, %d workers registered); not starting "
           "another", daemon, st.workers);
    exit(1);
  }
  if(AI_MAX_WORKERS - others < nworkers){
    errmsg("%d processes are registered as workers; no room for %d more "
           "(at most %d)", others, nworkers, AI_MAX_WORKERS);
    exit(1);
  }
}

// Kills the workers of an earlier ai_daemon that was killed (ai_worker
// processes re-parented to init, still registered), and waits until they
// are gone so that their registrations are released.
static void
retire_orphans(void)
{
  static struct procinfo rows[NPROC];
  int me = getpid();

  for(int round = 0; round < 200; round++){
    int n = procinfo(rows, NPROC), found = 0;
    for(int i = 0; i < n; i++){
      struct procinfo *p = &rows[i];
      if(p->pid != me && p->ppid == 1 && p->state != PS_ZOMBIE &&
         strcmp(p->name, WORKER) == 0){
        if(round == 0)
          logmsg("retiring worker pid %d of an earlier ai_daemon", p->pid);
        if(!p->killed)
          kill(p->pid);
        found++;
      }
    }
    if(found == 0)
      return;
    sleep(1);
  }
  errmsg("earlier workers did not exit; going on");
}

int
main(int argc, char *argv[])
{
  int readyfd = -1, regp[2];
  char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  char c, repack[64];

  if(strcmp(prog, WORKER) == 0){
    // a worker the supervisor started: ai_worker --reg-fd FD
    if(argc != 3 || strcmp(argv[1], "--reg-fd") != 0){
      fprintf(2, "usage: " WORKER " --reg-fd FD (ai_daemon starts it)\n");
      exit(1);
    }
    if(ai_info(&info) < 0){
      errmsg("no AI device");
      exit(1);
    }
    worker(atoi(argv[2]));
  }
  for(int i = 1; i < argc; i++){
    if(strcmp(argv[i], "-w") == 0 && i + 1 < argc){
      nworkers = atoi(argv[++i]);
      if(nworkers < 1 || nworkers > AI_MAX_WORKERS){
        errmsg("-w wants 1..%d workers", AI_MAX_WORKERS);
        exit(1);
      }
    } else if(strcmp(argv[i], "--ready-fd") == 0 && i + 1 < argc){
      readyfd = atoi(argv[++i]);
    } else if(strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0){
      usage();
      exit(0);
    } else {
      usage();
      exit(1);
    }
  }
  ignintr(1);

  wait_model();
  retire_orphans();
  refuse_second_daemon();
  repack[0] = 0;  // name the one-time repack only when the load time includes one
  if(info.repack_us)
    snprintf(repack, sizeof(repack), " (of which one-time int8 repack %lu us)",
             info.repack_us);
  logmsg("model %s (%s, vocab %d, context %d) ready on the AI device, "
         "loaded in %lu us%s%s", info.name, info.arch, info.vocab_size,
         info.max_context, info.load_us, repack,
         (info.flags & AI_CFG_SYNTHETIC) ? "; synthetic weights" : "");

  // each worker writes one byte to regp once registered
  if(pipe(regp) < 0){
    errmsg("pipe failed");
    exit(1);
  }
  for(int i = 0; i < nworkers; i++)
    if(start_worker(i, regp[1], readyfd, regp[0]) < 0)
      exit(1);
  close(regp[1]);
  int ok = 0;
  while(ok < nworkers && read(regp[0], &c, 1) == 1)
    ok += c == '1';
  close(regp[0]);
  if(ok < nworkers){
    errmsg("only %d of %d workers registered", ok, nworkers);
    for(int i = 0; i < nworkers; i++)
      if(wpid[i])
        kill(wpid[i]);
    exit(1);
  }
  logmsg("%d workers registered", nworkers);
  if(readyfd >= 0){
    write(readyfd, "1", 1);
    close(readyfd);
  }

  // supervise: restart a worker that exits (a crash or a kill)
  for(;;){
    int status, pid = wait(&status);
    if(pid < 0){
      errmsg("no workers left");
      exit(1);
    }
    for(int i = 0; i < nworkers; i++){
      if(wpid[i] != pid)
        continue;
      logmsg("worker pid %d exited status=%d; starting another", pid, status);
      if(time_us() - wstart[i] < QUICK_EXIT_US)
        sleep(100);       // it keeps dying: do not spin
      if(ai_info(&info) < 0)
        errmsg("ai_info failed");
      start_worker(i, -1, -1, -1);
    }
  }
}
