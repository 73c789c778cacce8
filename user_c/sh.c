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
// A line is tokenized, parsed into a tree of struct node, and run. Every
// allocation for a line comes from one arena freed after the line.

#include "types.h"
#include "stat.h"
#include "fcntl.h"
#include "user.h"

#define LINEMAX   4096    // longest input line
#define STATUSCH  '\x01'  // stands for "$?" in a word until it is run

// ------------------------------------------------------------------ arena

struct chunk {
  struct chunk *next;
  int used, cap;
  char data[];
};

static struct chunk *arena;

static void *
alloc(int n)
{
  struct chunk *c = arena;

  n = (n + 15) & ~15;
  if(c == 0 || c->used + n > c->cap){
    int cap = n > 4096 ? n : 4096;
    if((c = malloc(sizeof(*c) + cap)) == 0){
      fprintf(2, "sh: out of memory\n");
      exit(1);
    }
    c->cap = cap;
    c->used = 0;
    c->next = arena;
    arena = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

static void
freearena(void)
{
  while(arena){
    struct chunk *next = arena->next;
    free(arena);
    arena = next;
  }
}

// ------------------------------------------------------------------ tokens

enum tok { T_END, T_WORD, T_SEMI, T_AMP, T_AND, T_OR, T_PIPE, T_LPAREN,
           T_RPAREN, T_REDIR };

struct redir {
  int fd;               // the descriptor redirected
  int mode;             // open() flags; -1 for a ">&M" duplication
  int append;           // ">>"
  int dupfd;            // ">&M": M
  char *file;           // target file name
  struct redir *next;
};

struct token {
  enum tok type;
  char *word;           // T_WORD
  struct redir *redir;  // T_REDIR (file is filled by the parser)
};

struct lexer {
  const char *p;        // next input character
  char *wbuf;           // scratch for one word, as long as the input
  struct token *toks;
  int ntok, cap;
  int err;
};

static void
push(struct lexer *lx, enum tok type, char *word, struct redir *r)
{
  if(lx->ntok == lx->cap){
    int cap = lx->cap ? 2 * lx->cap : 32;
    struct token *t = alloc(cap * sizeof(*t));
    memmove(t, lx->toks, lx->ntok * sizeof(*t));
    lx->toks = t;
    lx->cap = cap;
  }
  lx->toks[lx->ntok].type = type;
  lx->toks[lx->ntok].word = word;
  lx->toks[lx->ntok].redir = r;
  lx->ntok++;
}

static int
isspecial(char c)
{
  return c == 0 || c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
         c == ';' || c == '&' || c == '|' || c == '<' || c == '>' ||
         c == '(' || c == ')';
}

// Reads one word starting at lx->p, resolving quotes and escapes.
static char *
lexword(struct lexer *lx)
{
  char *w, *o = lx->wbuf;
  const char *p = lx->p;
  char q = 0;   // the open quote, if any

  while(*p && (q || !isspecial(*p))){
    if(q == '\'' && *p == '\''){
      q = 0;
      p++;
    } else if(q == '\''){
      *o++ = *p++;
    } else if(*p == '$' && p[1] == '?'){
      *o++ = STATUSCH;
      p += 2;
    } else if(q == '"' && *p == '"'){
      q = 0;
      p++;
    } else if(q == '"' && *p == '\\' && p[1] && strchr("\"\\$", p[1])){
      *o++ = p[1];
      p += 2;
    } else if(q == '"'){
      *o++ = *p++;
    } else if(*p == '\'' || *p == '"'){
      q = *p++;
    } else if(*p == '\\' && p[1]){
      *o++ = p[1];
      p += 2;
    } else {
      *o++ = *p++;
    }
  }
  if(q){
    fprintf(2, "sh: missing closing %c\n", q);
    lx->err = 1;
  }
  *o = 0;
  lx->p = p;
  w = alloc(o - lx->wbuf + 1);
  strcpy(w, lx->wbuf);
  return w;
}

// Reads a redirection operator ([N] already consumed into fd).
static void
lexredir(struct lexer *lx, int fd)
{
  struct redir *r = alloc(sizeof(*r));
  const char *p = lx->p;

  if(*p == '<'){
    r->fd = fd < 0 ? 0 : fd;
    r->mode = O_RDONLY;
    p++;
  } else {
    r->fd = fd < 0 ? 1 : fd;
    p++;
    if(*p == '>'){
      r->append = 1;
      r->mode = O_RDWR | O_CREATE;
      p++;
    } else if(*p == '&' && isdigit(p[1])){
      r->mode = -1;
      r->dupfd = strtol(p + 1, (char **)&p, 10);
    } else {
      r->mode = O_WRONLY | O_CREATE | O_TRUNC;
    }
  }
  lx->p = p;
  push(lx, T_REDIR, 0, r);
}

// Splits a line into tokens. Returns 0, or -1 after printing an error.
static int
lex(struct lexer *lx, const char *s)
{
  lx->p = s;
  lx->wbuf = alloc(strlen(s) + 1);
  for(;;){
    const char *p = lx->p;
    while(*p == ' ' || *p == '\t' || *p == '\r')
      p++;
    lx->p = p;
    if(*p == '#'){
      while(*p && *p != '\n')
        p++;
      lx->p = p;
      continue;
    }
    if(*p == 0)
      break;
    // "2>file": a number right before a redirection names the descriptor
    const char *q = p;
    while(isdigit(*q))
      q++;
    if(q > p && (*q == '<' || *q == '>')){
      int fd = atoi(p);
      lx->p = q;
      lexredir(lx, fd);
      continue;
    }
    lx->p = p + 1;
    if(*p == '\n' || *p == ';')
      push(lx, T_SEMI, 0, 0);
    else if(p[0] == '&' && p[1] == '&')
      lx->p++, push(lx, T_AND, 0, 0);
    else if(*p == '&')
      push(lx, T_AMP, 0, 0);
    else if(p[0] == '|' && p[1] == '|')
      lx->p++, push(lx, T_OR, 0, 0);
    else if(*p == '|')
      push(lx, T_PIPE, 0, 0);
    else if(*p == '(')
      push(lx, T_LPAREN, 0, 0);
    else if(*p == ')')
      push(lx, T_RPAREN, 0, 0);
    else if(*p == '<' || *p == '>'){
      lx->p = p;
      lexredir(lx, -1);
    } else {
      lx->p = p;
      push(lx, T_WORD, lexword(lx), 0);
    }
    if(lx->err)
      return -1;
  }
  push(lx, T_END, 0, 0);
  return 0;
}

// ------------------------------------------------------------------ parser

enum ntype { N_CMD, N_SUB, N_PIPE, N_SEQ, N_AND, N_OR, N_BACK };

struct node {
  enum ntype type;
  struct node *left, *right;  // N_PIPE/N_SEQ/N_AND/N_OR; N_SUB/N_BACK: left
  char **argv;                // N_CMD: NULL-terminated
  int argc;
  struct redir *redirs;       // N_CMD, N_SUB
};

struct parser {
  struct token *t;            // current token
  int err;
};

static const char *
tokname(struct token *t)
{
  static const char *names[] = {
    [T_END] "end of line", [T_WORD] "word", [T_SEMI] ";", [T_AMP] "&",
    [T_AND] "&&", [T_OR] "||", [T_PIPE] "|", [T_LPAREN] "(",
    [T_RPAREN] ")", [T_REDIR] "redirection",
  };
  return t->type == T_WORD ? t->word : names[t->type];
}

static struct node *
syntax(struct parser *ps)
{
  if(!ps->err)
    fprintf(2, "sh: syntax error near '%s'\n", tokname(ps->t));
  ps->err = 1;
  return 0;
}

static struct node *
mknode(enum ntype type, struct node *left, struct node *right)
{
  struct node *n = alloc(sizeof(*n));

  n->type = type;
  n->left = left;
  n->right = right;
  return n;
}

// Takes a redirection token and the word after it.
static struct redir *
parseredir(struct parser *ps)
{
  struct redir *r = ps->t->redir;

  ps->t++;
  if(r->mode == -1)
    return r;
  if(ps->t->type != T_WORD){
    syntax(ps);
    return 0;
  }
  r->file = ps->t->word;
  ps->t++;
  return r;
}

static struct node *parselist(struct parser *ps);

static struct node *
parsecmd(struct parser *ps)
{
  struct node *n;
  struct redir *r, **rtail;
  int argc = 0;

  if(ps->t->type == T_LPAREN){
    ps->t++;
    n = mknode(N_SUB, parselist(ps), 0);
    if(ps->err)
      return 0;
    if(ps->t->type != T_RPAREN || n->left == 0)
      return syntax(ps);
    ps->t++;
  } else {
    n = mknode(N_CMD, 0, 0);
  }
  rtail = &n->redirs;
  for(struct token *t = ps->t; t->type == T_WORD || t->type == T_REDIR; t++)
    argc += t->type == T_WORD;
  if(n->type == N_CMD)
    n->argv = alloc((argc + 1) * sizeof(char *));
  else if(argc > 0)
    return syntax(ps);
  while(ps->t->type == T_WORD || ps->t->type == T_REDIR){
    if(ps->t->type == T_WORD){
      n->argv[n->argc++] = ps->t->word;
      ps->t++;
    } else {
      if((r = parseredir(ps)) == 0)
        return 0;
      *rtail = r;
      rtail = &r->next;
    }
  }
  if(n->type == N_CMD && n->argc == 0 && n->redirs == 0)
    return syntax(ps);
  return n;
}

static struct node *
parsepipe(struct parser *ps)
{
  struct node *n = parsecmd(ps);

  while(n && ps->t->type == T_PIPE){
    ps->t++;
    struct node *r = parsecmd(ps);
    n = r ? mknode(N_PIPE, n, r) : 0;
  }
  return n;
}

static struct node *
parseandor(struct parser *ps)
{
  struct node *n = parsepipe(ps);

  while(n && (ps->t->type == T_AND || ps->t->type == T_OR)){
    enum ntype type = ps->t->type == T_AND ? N_AND : N_OR;
    ps->t++;
    struct node *r = parsepipe(ps);
    n = r ? mknode(type, n, r) : 0;
  }
  return n;
}

// Returns the list, or 0 when it is empty or on error (ps->err).
static struct node *
parselist(struct parser *ps)
{
  struct node *list = 0, *n;

  for(;;){
    while(ps->t->type == T_SEMI)
      ps->t++;
    if(ps->t->type == T_END || ps->t->type == T_RPAREN)
      return list;
    if((n = parseandor(ps)) == 0)
      return syntax(ps);
    if(ps->t->type == T_AMP){
      ps->t++;
      n = mknode(N_BACK, n, 0);
    } else if(ps->t->type == T_SEMI){
      ps->t++;
    } else if(ps->t->type != T_END && ps->t->type != T_RPAREN){
      return syntax(ps);
    }
    list = list ? mknode(N_SEQ, list, n) : n;
  }
}

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
  out = o = alloc(n + 1);
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
    freearena();
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
  if(strchr(name, '/') == 0){
    char *path = alloc(strlen(name) + 2);
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

// Tokenizes, parses and runs one line (or a whole -c string).
static int
runline(const char *line)
{
  struct lexer lx;
  struct parser ps;
  struct node *n;

  memset(&lx, 0, sizeof(lx));
  if(lex(&lx, line) < 0){
    laststatus = 2;
  } else {
    ps.t = lx.toks;
    ps.err = 0;
    n = parselist(&ps);
    if(!ps.err && ps.t->type != T_END)
      syntax(&ps);
    if(ps.err)
      laststatus = 2;
    else if(n)
      run(n);
  }
  freearena();
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
