// sh.h: what the shell's parser (shparse.c) hands to its runner (sh.c).
//
// A line becomes a tree of struct node. Everything for one line (tokens,
// words, nodes) comes from one arena: shalloc() and shfree().

#define STATUSCH  '\x01'  // stands for "$?" in a word until it is run

struct redir {
  int fd;               // the descriptor redirected
  int mode;             // open() flags; -1 for a ">&M" duplication
  int append;           // ">>"
  int dupfd;            // ">&M": M
  char *file;           // target file name
  struct redir *next;
};

// node types: a command, a ( subshell ), a | b, a ; b, a && b, a || b, a &
enum ntype { N_CMD, N_SUB, N_PIPE, N_SEQ, N_AND, N_OR, N_BACK };

struct node {
  enum ntype type;
  struct node *left, *right;  // N_PIPE/N_SEQ/N_AND/N_OR; N_SUB/N_BACK: left
  char **argv;                // N_CMD: NULL-terminated
  int argc;
  struct redir *redirs;       // N_CMD, N_SUB
};

// shparse.c
void *shalloc(int n);            // zeroed; exits the shell when out of memory
void shfree(void);               // frees everything shalloc handed out
struct node *parse(const char *line, int *err);
