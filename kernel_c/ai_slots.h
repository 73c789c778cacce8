// ai_slots.h: the AI service's request slots and circular queue, as plain
// data and functions (ai_slots.c) with no locks, no sleeping and no
// hardware. ai_service.c wraps them with its lock, sleep/wakeup, user
// copies and the device; a host test can compile ai_slots.c alone.
//
// Include after types.h and ai.h.

// result text lives in whole pages from kalloc(): up to AI_MAX_PREDICT ids
// of at most 10 digits, a space after each but the last, and a NUL
#define AIS_PAGESZ      4096
#define AIS_TEXTMAX     (AI_MAX_PREDICT * 11)
#define AIS_TEXTPAGES   ((AIS_TEXTMAX + AIS_PAGESZ - 1) / AIS_PAGESZ)

// one request slot
struct aislot {
  int id;               // request id, never reused; 0 while FREE
  int state;            // AI_FREE .. AI_FAILED
  int err;              // AI_OK, or why it FAILED
  int owner;            // pid of the submitter; 0 once it exited (orphan)
  int worker;           // pid of the worker that took it, or 0
  int chain;            // device chain running it (virtio_ai.c), or -1
  int ntokens;
  int npredict;
  int flags;            // AI_STOP_EOS, AI_NO_SPEC (AI_NONBLOCK only matters at submit)
  uint32 seed, temp_milli, top_k, top_p_milli;
  uint32 speculate;     // drafted tokens a step may verify, 0 = the device's default
  uint32 tokens[AI_MAX_TOKENS];
  int ngenerated;       // tokens the device produced (final once DONE)
  int nread;            // the furthest id ai_read handed out (for the trace)
  int ncached;          // prompt tokens from the device's prefix cache
  int nsteps;           // decode steps after the first token (once DONE)
  int result_len;       // bytes of text, excluding the NUL
  char *text[AIS_TEXTPAGES];  // the result, "id id id\0", page by page
  uint64 t_submit, t_dispatch, t_accept, t_first, t_done;
};

// slot indices in submission order; holds exactly the QUEUED slots, so it
// can never overflow (it is as long as there are slots)
struct aiqueue {
  int ring[AI_NSLOT];
  int head;             // the oldest entry
  int count;
};

// the whole service state
struct aisvc {
  struct aislot slot[AI_NSLOT];
  struct aiqueue queue;
  int nfree;                    // FREE slots
  int next_id;                  // the next request id (from 1, never reused)
  int workers[AI_MAX_WORKERS];  // registered worker pids, 0 = empty entry
  uint64 submitted, completed, failed;
};

// what ai_slots.c needs from its surroundings (kalloc.c and string.c in the
// kernel; a host test provides its own)
void*   kalloc(void);
void    kfree(void *);
void*   memset(void*, int, uint);
void*   memmove(void*, const void*, uint);

// ai_slots.c
void            ais_init(struct aisvc *);
int             ais_check_args(const struct ai_submit_args *, int sampling);
int             ais_check_model(const struct ai_submit_args *, const uint32 *tokens,
                                uint32 vocab, uint32 ctx);
struct aislot*  ais_claim(struct aisvc *, int owner,
                          const struct ai_submit_args *, const uint32 *tokens,
                          uint64 now);
struct aislot*  ais_lookup(struct aisvc *, int id);
struct aislot*  ais_owned(struct aisvc *, int id, int pid);
struct aislot*  ais_head(struct aisvc *);
void            ais_dispatch(struct aisvc *, struct aislot *, int worker,
                             uint64 now);
int             ais_finish_ids(struct aislot *, const uint32 *ids, int n);
int             ais_text_alloc(struct aislot *, int len);
void            ais_text_free(struct aislot *);
char*           ais_text_at(struct aislot *, int off, int *n);
int             ais_text_ids(struct aislot *, int *pos, int skip, uint32 *ids,
                             int cap);
void            ais_done(struct aisvc *, struct aislot *);
void            ais_fail(struct aisvc *, struct aislot *, int err);
void            ais_free(struct aisvc *, struct aislot *);
uint            ais_owner_gone(struct aisvc *, int pid);
uint            ais_worker_gone(struct aisvc *, int pid);
int             ais_worker_add(struct aisvc *, int pid);
int             ais_is_worker(struct aisvc *, int pid);
int             ais_nworkers(struct aisvc *);
void            ais_status(const struct aislot *, struct ai_status *);
void            ais_stats(const struct aisvc *, struct ai_stats *);
int             ais_index(const struct aisvc *, const struct aislot *);
