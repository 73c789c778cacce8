// syscall.h: system call numbers, the single source of truth.
//
// user_c's stubs (usys.S) are generated from this file by scripts/gen_usys.py
// and the harness reads it for traces and the debugger. ABI: number in a7,
// arguments in a0..a5, result in a0; every error returns -1.
// Keep one "#define SYS_<name> <number>" per line.

// xv6 core
#define SYS_fork     1
#define SYS_exit     2
#define SYS_wait     3
#define SYS_pipe     4
#define SYS_read     5
#define SYS_kill     6
#define SYS_exec     7
#define SYS_fstat    8
#define SYS_chdir    9
#define SYS_dup     10
#define SYS_getpid  11
#define SYS_sbrk    12
#define SYS_sleep   13
#define SYS_uptime  14
#define SYS_open    15
#define SYS_write   16
#define SYS_mknod   17
#define SYS_unlink  18
#define SYS_link    19
#define SYS_mkdir   20
#define SYS_close   21

// our additions
#define SYS_time_us  22  // uint64 time_us(void): microseconds since boot
#define SYS_halt     23  // int halt(int status): power the machine off
#define SYS_procinfo 24  // int procinfo(struct procinfo *p, int n): process table snapshot
#define SYS_freemem  25  // int freemem(void): free physical pages
#define SYS_ignintr  26  // int ignintr(int on): 1 = console ^C spares this process (reset by exec); returns the old value

// the AI service (kernel_c/ai_service.c, ai.h); each call records its outcome for ai_lasterr
#define SYS_ai_submitx         30  // int ai_submitx(struct ai_submit_args *a): queue a request; its id
#define SYS_ai_wait            31  // int ai_wait(int reqid, char *out, int cap): result text (owner, once); its length
#define SYS_ai_query           32  // int ai_query(int reqid, struct ai_status *st): snapshot (owner); never blocks
#define SYS_ai_call            33  // int ai_call(const uint32 *tokens, int n, int predict, char *out, int cap): submit + wait
#define SYS_ai_worker_register 34  // int ai_worker_register(void): the caller becomes a worker
#define SYS_ai_worker_get      35  // int ai_worker_get(uint32 *tokens, int cap, struct ai_work *w): take the oldest request
#define SYS_ai_worker_run      36  // int ai_worker_run(int reqid): the device computes it; 0 when DONE
#define SYS_ai_worker_complete 37  // int ai_worker_complete(int reqid, const char *out, int len, int status)
#define SYS_ai_info            38  // int ai_info(struct ai_info *info): the device and its model
#define SYS_ai_stats           39  // int ai_stats(struct ai_stats *st): slot and request counters
#define SYS_ai_lasterr         40  // int ai_lasterr(void): AI_OK or the AI_E* reason of the last AI call
#define SYS_ai_read            41  // int ai_read(int reqid, uint32 *ids, int from, int cap, int timeout_ms): ids from..; 0 = ended
