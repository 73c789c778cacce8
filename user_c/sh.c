// sh: the shell.
//
//   sh               read commands from standard input ("$ " prompt when
//                    standard input is the console)
//   sh -c CMDS       run CMDS (several lines allowed) and exit
//   sh FILE          run the commands in FILE
//
// The exit status is that of the last command run (`exit N` overrides), so
// `harness run -c "..."` ends with the status of its last command.
//
// Grammar, as a recursive-descent parser reads it (newline = ';'):
//   list     = { andor ( ';' | '&' ) } [ andor ]
//   andor    = pipeline { ( '&&' | '||' ) pipeline }
//   pipeline = command { '|' command }
//   command  = '(' list ')' { redir }  |  { word | redir }
//   redir    = [N] '<' word | [N] '>' word | [N] '>>' word | [N] '>&' M
// Words may be quoted ('...' literally, "..." with \" \\ \$), '\' escapes
// one character, '#' starts a comment, and $? is the last exit status.
// Builtins: cd DIR, exit [N]. A command name without '/' runs /NAME.
//
// shparse.c turns a line into a tree of struct node (sh.h); this file runs
// it. Every allocation for a line comes from one arena freed after it.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "param.h"
#include "user.h"
#include "sh.h"

#define LINEMAX   4096    // longest input line

// ------------------------------------------------------------------ running

static int laststatus;        // $?
static int interactive;

// Replaces each STATUSCH in w by the last exit status.
static char *
expand(char *w)
{
  char num[16], *o, *out;
  int n = 0;

  if(w == 0 || strchr(w, STATUSCH) == 0)
    return w;
  snprintf(num, sizeof(num), "%d", laststatus);
  for(char *p = w; *p; p++)
    n += *p == STATUSCH ? strlen(num) : 1;
  out = o = shalloc(n + 1);
  for(char *p = w; *p; p++){
    if(*p == STATUSCH){
      strcpy(o, num);
      o += strlen(num);
    } else {
      *o++ = *p;
    }
  }
  *o = 0;
  return out;
}

// Makes descriptor `to` refer to what `from` refers to, and closes `from`.
// Relies on dup() returning the lowest free descriptor.
static int
movefd(int from, int to)
{
  if(from == to)
    return 0;
  close(to);
  if(dup(from) != to){
    fprintf(2, "sh: cannot set up descriptor %d\n", to);
    return -1;
  }
  close(from);
  return 0;
}

// Applies redirections in the current (child) process.
static int
redirect(struct redir *r)
{
  char buf[512];
  int fd;

  for(; r; r = r->next){
    if(r->mode == -1){
      // ">&M": fd becomes a copy of M
      if((fd = dup(r->dupfd)) < 0){
        fprintf(2, "sh: bad descriptor %d\n", r->dupfd);
        return -1;
      }
      if(movefd(fd, r->fd) < 0)
        return -1;
      continue;
    }
    char *file = expand(r->file);
    if((fd = open(file, r->mode)) < 0){
      fprintf(2, "sh: cannot open %s\n", file);
      return -1;
    }
    // no lseek: ">>" reaches the end by reading through the file
    if(r->append)
      while(read(fd, buf, sizeof(buf)) > 0)
        ;
    if(movefd(fd, r->fd) < 0)
      return -1;
  }
  return 0;
}

// cd and exit run inside the shell itself. Returns 1 if argv was a builtin.
static int
builtin(int argc, char **argv, int *status)
{
  if(strcmp(argv[0], "cd") == 0){
    char *dir = argc > 1 ? argv[1] : "/";
    *status = 0;
    if(argc > 2 || chdir(dir) < 0){
      fprintf(2, "cd: cannot cd to %s\n", argc > 2 ? "several places" : dir);
      *status = 1;
    }
    return 1;
  }
  if(strcmp(argv[0], "exit") == 0){
    shfree();
    exit(argc > 1 ? atoi(argv[1]) : laststatus);
  }
  return 0;
}

static int run(struct node *n);

// Runs a pipeline stage or a command in a child process; never returns.
static void
runchild(struct node *n)
{
  int status;

  if(redirect(n->redirs) < 0)
    exit(1);
  if(n->type == N_SUB)
    exit(run(n->left));
  if(n->argc == 0)
    exit(0);
  for(int i = 0; i < n->argc; i++)
    n->argv[i] = expand(n->argv[i]);
  if(builtin(n->argc, n->argv, &status))
    exit(status);
  char *name = n->argv[0];
  if(n->argc > MAXARG){         // exec would refuse it: say why
    fprintf(2, "exec %s failed: too many arguments: at most %d\n", name,
            MAXARG);
    exit(127);
  }
  if(strchr(name, '/') == 0){
    char *path = shalloc(strlen(name) + 2);
    path[0] = '/';
    strcpy(path + 1, name);
    exec(path, n->argv);
  }
  exec(name, n->argv);
  fprintf(2, "exec %s failed\n", name);
  exit(127);
}

// Waits until every pid in pids[0..n) has exited (reaping finished
// background jobs on the way) and returns the status of pids[n-1].
static int
waitall(int *pids, int n)
{
  int left = 0, status = -1, st, pid;

  for(int i = 0; i < n; i++)
    left += pids[i] >= 0;
  while(left > 0 && (pid = wait(&st)) >= 0){
    for(int i = 0; i < n; i++){
      if(pids[i] == pid){
        pids[i] = -1;
        left--;
        if(i == n - 1)
          status = st;
      }
    }
  }
  return status;
}

static int
spawn(struct node *n)
{
  int pid = fork();

  if(pid == 0)
    runchild(n);
  if(pid < 0)
    fprintf(2, "sh: fork failed\n");
  return pid;
}

static int
runpipe(struct node *n)
{
  struct node *stages[64];
  int pids[64], nstage = 0, in = 0, p[2];

  // the tree leans left: a|b|c is PIPE(PIPE(a, b), c)
  for(struct node *s = n; ; s = s->left){
    if(nstage == 64){
      fprintf(2, "sh: pipeline too long\n");
      return 1;
    }
    if(s->type != N_PIPE){
      stages[nstage++] = s;
      break;
    }
    stages[nstage++] = s->right;
  }
  for(int i = 0; i < nstage / 2; i++){
    struct node *t = stages[i];
    stages[i] = stages[nstage - 1 - i];
    stages[nstage - 1 - i] = t;
  }
  for(int i = 0; i < nstage; i++){
    int last = i == nstage - 1;
    if(!last && pipe(p) < 0){
      fprintf(2, "sh: pipe failed\n");
      p[0] = p[1] = -1;
      last = 1;
    }
    pids[i] = fork();
    if(pids[i] == 0){
      if(!last)
        close(p[0]);
      if(in != 0 && movefd(in, 0) < 0)
        exit(1);
      if(!last && movefd(p[1], 1) < 0)
        exit(1);
      runchild(stages[i]);
    }
    if(pids[i] < 0)
      fprintf(2, "sh: fork failed\n");
    if(in != 0)
      close(in);
    if(!last){
      close(p[1]);
      in = p[0];
    } else if(i != nstage - 1){
      nstage = i + 1;   // pipe() failed: stop the pipeline here
    }
  }
  return waitall(pids, nstage);
}

// Runs a parsed list in the shell process and returns its exit status.
static int
run(struct node *n)
{
  int status, pid;

  switch(n->type){
  case N_CMD:
    if(n->argc > 0 && n->redirs == 0){
      for(int i = 0; i < n->argc; i++)
        n->argv[i] = expand(n->argv[i]);
      if(builtin(n->argc, n->argv, &status))
        break;
    }
    // fall through
  case N_SUB:
    pid = spawn(n);
    status = pid < 0 ? 1 : waitall(&pid, 1);
    break;
  case N_PIPE:
    status = runpipe(n);
    break;
  case N_SEQ:
    run(n->left);
    status = run(n->right);
    break;
  case N_AND:
    status = run(n->left);
    if(status == 0)
      status = run(n->right);
    break;
  case N_OR:
    status = run(n->left);
    if(status != 0)
      status = run(n->right);
    break;
  case N_BACK:
    pid = fork();
    if(pid == 0)
      exit(run(n->left));
    if(pid < 0){
      fprintf(2, "sh: fork failed\n");
      status = 1;
    } else {
      if(interactive)
        printf("[%d]\n", pid);
      status = 0;
    }
    break;
  default:
    status = 1;
  }
  laststatus = status;
  return status;
}

// Parses and runs one line (or a whole -c string).
static int
runline(const char *line)
{
  int err;
  struct node *n = parse(line, &err);

  if(err)
    laststatus = 2;
  else if(n)
    run(n);
  shfree();
  return laststatus;
}

// ------------------------------------------------------------------ input

static char inbuf[LINEMAX];
static int inlen;

// Reads the next line (without its '\n') from fd into line. Returns 0,
// or -1 at end of input. A line longer than LINEMAX-1 is cut.
static int
readline(int fd, char *line)
{
  char *nl;
  int n, len;

  for(;;){
    inbuf[inlen] = 0;
    nl = strchr(inbuf, '\n');
    if(nl || inlen == LINEMAX - 1){
      len = nl ? nl - inbuf : inlen;
      if(!nl)
        fprintf(2, "sh: line too long, cut\n");
      memmove(line, inbuf, len);
      line[len] = 0;
      len += nl != 0;
      inlen -= len;
      memmove(inbuf, inbuf + len, inlen);
      return 0;
    }
    n = read(fd, inbuf + inlen, LINEMAX - 1 - inlen);
    if(n <= 0){
      if(inlen == 0)
        return -1;
      // last line without a newline
      memmove(line, inbuf, inlen);
      line[inlen] = 0;
      inlen = 0;
      return 0;
    }
    inlen += n;
  }
}

int
main(int argc, char *argv[])
{
  static char line[LINEMAX];
  struct stat st;
  int fd = 0;

  if(argc >= 2 && strcmp(argv[1], "-c") == 0){
    if(argc < 3){
      fprintf(2, "sh: -c needs a command string\n");
      return 2;
    }
    // ^C kills the commands (exec resets this), not the shell that waits
    // for them: init's `sh -c CMD` (harness run -c, --chat) must see CMD
    // through, e.g. chat, which stays when ^C stops an answer
    ignintr(1);
    return runline(argv[2]);
  }
  if(argc >= 2 && (fd = open(argv[1], O_RDONLY)) < 0){
    fprintf(2, "sh: cannot open %s\n", argv[1]);
    return 127;
  }
  interactive = fd == 0 && fstat(0, &st) == 0 && st.type == T_DEVICE;
  // ^C on the console kills the running command, not the shell
  if(interactive)
    ignintr(1);
  for(;;){
    if(interactive)
      write(2, "$ ", 2);
    if(readline(fd, line) < 0)
      break;
    runline(line);
  }
  return laststatus;
}
