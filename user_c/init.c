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
// Adding a service (e.g. the AI worker /ai_daemon): add a row to services[]
// before the shell, with a `wanted` test (e.g. only when the AI device is
// there) and respawn = 1. If the shell must wait until it is ready, give it
// a `start` function that forks and execs it with the write end of a pipe
// (`--ready-fd N`), reads one byte from the read end, and returns the pid
// (or -1, and set s->disabled to stop further restarts). A service that
// keeps dying within a second of its start is given up after MAX_QUICK
// tries; `essential` ones (the shell) then power the machine off.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "device.h"
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
  // state
  int pid;                      // running pid, 0 if not running
  int disabled;                 // given up on it
  int quick;                    // consecutive quick exits
  uint64 started_us;            // time_us() at the last start
};

static char *sh_argv[] = { "/sh", 0 };
static char *shc_argv[] = { "/sh", "-c", 0, 0 };  // [2]: init's -c argument

static struct service services[] = {
  // { "ai_daemon", ai_argv, ai_present, start_ai_daemon, 1, 0, 0 },  issue 4
  { "sh", sh_argv, 0, 0, 1, 1, 0 },
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
