// user.h: everything a user program can call: the system calls (stubs in
// build/user/usys.S, generated from kernel_c/syscall.h) and the user library
// (ulib.c, printf.c, umalloc.c).
//
// Include after kernel_c's types.h (and stat.h / fcntl.h / procinfo.h when
// used): programs build with -I kernel_c, as xv6's user/ includes kernel/.
// Every system call returns -1 on any error.

struct stat;
struct procinfo;

// system calls (kernel_c/syscall.h)
int fork(void);
void exit(int status) __attribute__((noreturn));
int wait(int *status);            // status may be 0; returns the child's pid
int pipe(int *fds);               // fds[0] read end, fds[1] write end
int read(int fd, void *buf, int n);
int write(int fd, const void *buf, int n);
int close(int fd);
int kill(int pid);
int exec(const char *path, char **argv);
int open(const char *path, int omode);
int mknod(const char *path, short major, short minor);
int unlink(const char *path);
int fstat(int fd, struct stat *st);
int link(const char *oldpath, const char *newpath);
int mkdir(const char *path);
int chdir(const char *path);
int dup(int fd);
int getpid(void);
char *sbrk(int n);                // returns the old break, (char*)-1 on error
int sleep(int ticks);
int uptime(void);                 // timer ticks since boot
uint64 time_us(void);             // microseconds since boot
int halt(int status);             // power off with this exit status
int procinfo(struct procinfo *p, int n); // fills up to n rows, returns count
int freemem(void);                // free physical pages
int ignintr(int on);              // 1: console ^C spares me (until exec)

// the AI service (kernel_c/ai.h, kernel_c/ai_service.c): every call returns
// -1 on error and ai_lasterr() then gives the AI_E* reason
#include "ai.h"
int ai_submitx(struct ai_submit_args *a);        // returns the request id
int ai_wait(int reqid, char *out, int out_cap);  // returns the result length
int ai_query(int reqid, struct ai_status *st);   // never blocks or consumes
int ai_read(int reqid, uint32 *ids, int from, int cap, int timeout_ms); // ids so far; 0 = ended
int ai_call(const uint32 *tokens, int ntokens, int npredict, char *out,
            int out_cap);                        // submit + wait
int ai_worker_register(void);
int ai_worker_get(uint32 *tokens, int cap, struct ai_work *w); // ntokens
int ai_worker_run(int reqid);     // the device computes it; 0 when DONE
int ai_worker_complete(int reqid, const char *out, int len, int status);
int ai_info(struct ai_info *info);
int ai_stats(struct ai_stats *st);
int ai_lasterr(void);             // AI_E* of this process's last failed AI call

// ulib.c
#define NULL ((void *)0)
int stat(const char *path, struct stat *st);
char *strcpy(char *dst, const char *src);
char *strncpy(char *dst, const char *src, int n);
char *strcat(char *dst, const char *src);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, uint n);
uint strlen(const char *s);
char *strchr(const char *s, char c);
char *strrchr(const char *s, char c);
char *strstr(const char *hay, const char *needle);
void *memset(void *dst, int c, uint n);
void *memmove(void *dst, const void *src, int n);
void *memcpy(void *dst, const void *src, uint n);
int memcmp(const void *a, const void *b, uint n);
char *gets(char *buf, int max);
int atoi(const char *s);
long strtol(const char *s, char **end, int base);
int isspace(int c);
int isdigit(int c);

// printf.c: %d %i %u %x %X %p %s %c %% with l/ll/z, field width, '-'
// (left-justify), '0' (zero-pad) and '.N' (precision; max chars for %s).
// Output goes out in as few write() calls as possible.
typedef __builtin_va_list va_list;
#define va_start(ap, last) __builtin_va_start(ap, last)
#define va_arg(ap, type) __builtin_va_arg(ap, type)
#define va_end(ap) __builtin_va_end(ap)

int printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fprintf(int fd, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
int vfprintf(int fd, const char *fmt, va_list ap);
int snprintf(char *buf, int size, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
int vsnprintf(char *buf, int size, const char *fmt, va_list ap);

// ailib.c: helpers for AI clients (link $(UBUILD)/ailib.o, see user.mk)
int ai_submit(const uint32 *tokens, int ntokens, int npredict); // greedy, blocking
int ai_wait_status(int reqid, char *out, int out_cap, struct ai_status *st);
const char *ai_strerror(int err);
const char *ai_statename(int state);
const char *ai_family(const char *arch);  // "SmolLM", "Qwen3.5", "unknown-model"
int ai_parse_u32(const char *word, uint32 *v);
int ai_format_ids(char *buf, int cap, const uint32 *ids, int n);
// ai_idparser: whitespace-separated decimal ids fed in pieces (files, lines)
#define AI_IDS_OK       0
#define AI_IDS_BADCHAR  (-1)  // a byte that is neither a digit nor blank
#define AI_IDS_OVERFLOW (-2)  // an id > 0xffffffff
#define AI_IDS_TOOMANY  (-3)  // more than max ids
struct ai_idparser {
  uint32 *ids;
  int max, n;           // capacity and ids so far
  uint64 cur;           // the id being read
  int indigit;          // inside an id
  int pos;              // bytes consumed so far
  int err, errpos;      // first error (AI_IDS_*) and its byte offset
};
void ai_ids_init(struct ai_idparser *p, uint32 *ids, int max);
int ai_ids_feed(struct ai_idparser *p, const char *buf, int len);
int ai_ids_end(struct ai_idparser *p);   // count, or an AI_IDS_* error

// umalloc.c
void *malloc(uint n);
void *calloc(uint n, uint size);
void *realloc(void *p, uint n);
void free(void *p);
