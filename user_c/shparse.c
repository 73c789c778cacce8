// shparse.c: the shell's lexer and parser (grammar in sh.c's header).
//
// lex() turns a line into tokens, resolving quotes, escapes and "N>"
// redirections; the recursive-descent parser builds the struct node tree
// the runner in sh.c executes. All memory comes from the line's arena.

#include "types.h"
#include "fcntl.h"
#include "user.h"
#include "sh.h"

// ------------------------------------------------------------------ arena

struct chunk {
  struct chunk *next;
  int used, cap;
  char data[];
};

static struct chunk *arena;

void *
shalloc(int n)
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

void
shfree(void)
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
    struct token *t = shalloc(cap * sizeof(*t));
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
  w = shalloc(o - lx->wbuf + 1);
  strcpy(w, lx->wbuf);
  return w;
}

// Reads a redirection operator ([N] already consumed into fd).
static void
lexredir(struct lexer *lx, int fd)
{
  struct redir *r = shalloc(sizeof(*r));
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
  lx->wbuf = shalloc(strlen(s) + 1);
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
  struct node *n = shalloc(sizeof(*n));

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
    n->argv = shalloc((argc + 1) * sizeof(char *));
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

// Tokenizes and parses a line (or a whole -c string). Returns the tree, or
// 0 if the line is empty or wrong (*err = 1, after printing why).
struct node *
parse(const char *line, int *err)
{
  struct lexer lx;
  struct parser ps;
  struct node *n;

  memset(&lx, 0, sizeof(lx));
  *err = 0;
  if(lex(&lx, line) < 0){
    *err = 1;
    return 0;
  }
  ps.t = lx.toks;
  ps.err = 0;
  n = parselist(&ps);
  if(!ps.err && ps.t->type != T_END)
    syntax(&ps);
  *err = ps.err;
  return ps.err ? 0 : n;
}
