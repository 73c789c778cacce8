// init: the first user process (the kernel runs /init as pid 1).
//
//   init            interactive: keep a shell running on the console
//   init -c CMDS    what `harness run -c CMDS` boots: run `sh -c CMDS`,
//                   then power off with the shell's exit status
//
// init opens the console as fds 0, 1 and 2 (inherited by everything),
// starts the services in services[] in table order, and then loops in
// wait(): an exited service is restarted (or, for the -c shell, ends the
// run), and any other pid is an orphan that was re-parented to init.
//
// Adding a service: add a row to services[] before the shell, with a
// `wanted` test and respawn = 1. If the shell must wait until it is ready,
// give it a `start` function like start_ready() below. A service that
// keeps dying within a second of its start is given up after MAX_QUICK
// tries; `essential` ones (the shell) then power the machine off.
//
// The AI worker /ai_daemon (the course's protocol and messages) is started
// when ai_info() reports an AI device with a model (loading or ready), also
// in -c mode, so that `harness run --model smol -c "llmrun ..."` works:
// init passes the write end of a pipe (`ai_daemon --ready-fd N`) and blocks
// reading one byte, which the daemon writes once the model is READY and its
// workers are registered: "[init] ai_daemon ready (pid=P)". EOF instead
// (the daemon died first) disables it ("did not signal ready"). When it
// exits later: "[init] ai_daemon exited status=S" and it is restarted.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "device.h"
#include "virtio_ai.h"
#include "user.h"

#define RESTART_DELAY  10       // ticks to wait before restarting a crasher
#define QUICK_EXIT_US  1000000  // an exit this soon after start is a crash
#define MAX_QUICK      5        // crashes in a row before giving up

struct service {
  char *name;                   // for messages
  char **argv;                  // argv[0] is the program path
  int (*wanted)(void);          // start it only if this returns 1 (0 = always)
  int (*start)(struct service *); // fork+exec, returns pid (0 = spawn())
  int respawn;                  // restart it when it exits
  int essential;                // power off (status 1) if it cannot be kept up
  int halt_on_exit;             // power off with its exit status (-c shell)
  int announce;                 // print "[init] NAME exited status=S"
  // state
  int pid;                      // running pid, 0 if not running
  int disabled;                 // given up on it
  int quick;                    // consecutive quick exits
  uint64 started_us;            // time_us() at the last start
};

static char *sh_argv[] = { "/sh", 0 };
static char *shc_argv[] = { "/sh", "-c", 0, 0 };  // [2]: init's -c argument
static char *ai_argv[] = { "/ai_daemon", "--ready-fd", 0, 0 }; // [2]: the fd

static int ai_wanted(void);
static int start_ready(struct service *s);

static struct service services[] = {
  { "ai_daemon", ai_argv, ai_wanted, start_ready, 1, 0, 0, 1 },
  { "sh", sh_argv, 0, 0, 1, 1, 0, 0 },
};
#define NSERVICE (sizeof(services) / sizeof(services[0]))

// Plain fork+exec. The child's exec failure is reported and exits 127.
static int
spawn(struct service *s)
{
  int pid = fork();

  if(pid == 0){
    exec(s->argv[0], s->argv);
    fprintf(2, "init: exec %s failed\n", s->argv[0]);
    exit(127);
  }
  if(pid < 0)
    fprintf(2, "init: fork %s failed\n", s->name);
  return pid;
}

// The AI device is there and has (or is loading) a model.
static int
ai_wanted(void)
{
  struct ai_info info;

  if(ai_info(&info) < 0 || !info.present)
    return 0;
  return info.state == AI_DEV_LOADING || info.state == AI_DEV_READY;
}

// fork+exec with argv[2] = the write end of a pipe, then block until the
// service writes one byte there (the course's ai_daemon protocol).
static int
start_ready(struct service *s)
{
  int p[2], pid;
  char fd[8], c;

  if(pipe(p) < 0){
    fprintf(2, "[init] pipe %s failed\n", s->argv[0]);
    s->disabled = 1;
    return -1;
  }
  snprintf(fd, sizeof(fd), "%d", p[1]);
  s->argv[2] = fd;
  pid = fork();
  if(pid == 0){
    close(p[0]);
    exec(s->argv[0], s->argv);
    fprintf(2, "[init] exec %s failed\n", s->argv[0]);
    exit(127);
  }
  close(p[1]);
  if(pid < 0){
    fprintf(2, "[init] fork %s failed\n", s->argv[0]);
    fprintf(2, "[init] disabling %s after launch failure\n", s->name);
    close(p[0]);
    s->disabled = 1;
    return -1;
  }
  if(read(p[0], &c, 1) == 1 && c == '1'){
    fprintf(2, "[init] %s ready (pid=%d)\n", s->name, pid);
  } else {
    // it exits (or has exited) on its own; wait() reaps it
    fprintf(2, "[init] %s did not signal ready\n", s->name);
    fprintf(2, "[init] disabling %s restarts after startup failure\n",
            s->name);
    s->disabled = 1;
  }
  close(p[0]);
  return pid;
}

static void
start(struct service *s)
{
  if(s->disabled || (s->wanted && !s->wanted()))
    return;
  s->started_us = time_us();
  s->pid = s->start ? s->start(s) : spawn(s);
  if(s->pid < 0)
    s->pid = 0;
}

// A service exited with `status`: restart it, give up on it, or power off.
static void
exited(struct service *s, int status)
{
  s->pid = 0;
  if(s->halt_on_exit)
    halt(status);
  if(s->announce)
    fprintf(2, "[init] %s exited status=%d\n", s->name, status);
  if(!s->respawn)
    return;
  if(time_us() - s->started_us < QUICK_EXIT_US)
    s->quick++;
  else
    s->quick = 0;
  if(s->quick >= MAX_QUICK){
    fprintf(2, "init: %s keeps exiting (status %d); not restarting it\n",
            s->name, status);
    s->disabled = 1;
    if(s->essential)
      halt(1);
    return;
  }
  if(status != 0 && s->quick > 0)
    sleep(RESTART_DELAY);
  start(s);
}

static void
openconsole(void)
{
  if(open("/console", O_RDWR) < 0){
    mknod("/console", CONSOLE, 0);
    if(open("/console", O_RDWR) < 0)
      halt(1);          // no way to say anything: stop the machine
  }
  dup(0);               // stdout
  dup(0);               // stderr
}

int
main(int argc, char *argv[])
{
  int pid, status;

  openconsole();
  if(argc == 3 && strcmp(argv[1], "-c") == 0){
    struct service *sh = &services[NSERVICE - 1];
    shc_argv[2] = argv[2];
    sh->argv = shc_argv;
    sh->respawn = 0;
    sh->halt_on_exit = 1;
  }
  for(int i = 0; i < NSERVICE; i++)
    start(&services[i]);
  for(;;){
    pid = wait(&status);
    if(pid < 0){
      // no children: every service failed to start
      fprintf(2, "init: nothing left to run\n");
      halt(1);
    }
    for(int i = 0; i < NSERVICE; i++)
      if(services[i].pid == pid)
        exited(&services[i], status);
    // otherwise an orphan: reaping it was the whole point
  }
}
