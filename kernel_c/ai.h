// ai.h: the AI service as user programs see it (ai_submit / ai_wait /
// ai_query and the worker side used by ai_daemon).
//
// Shared by the kernel (ai_service.c), user programs (user.h includes it)
// and the harness (which reads the layouts from this file; never retype
// them). Every struct field is naturally aligned.
//
// Life of a request:  FREE -> QUEUED -> RUNNING -> DONE | FAILED -> FREE
//   ai_submit claims a FREE slot and queues it; a worker's ai_worker_get
//   takes it (RUNNING); the device finishes it (DONE or FAILED); the owner's
//   first ai_wait copies the result out and frees the slot (one-shot).
//   Meanwhile ai_read gives the owner the ids generated so far, as often as
//   it likes (it never consumes the request).

// limits
#define AI_NSLOT        8     // request slots (== circular queue length)
#define AI_MAX_TOKENS   255   // prompt tokens per request (the course's limit)
#define AI_MAX_PREDICT  4096  // generated tokens per request (also <= context)
#define AI_MAX_WORKERS  8     // worker processes registered at once
#define AI_MAX_SPECULATE 16   // drafted tokens a decode step may verify (speculate)

// request states (ai_status.state)
#define AI_FREE         0
#define AI_QUEUED       1
#define AI_RUNNING      2
#define AI_DONE         3
#define AI_FAILED       4
// their names, for messages (ai_statename)
#define AI_STATE_NAMES  { [AI_FREE] "free", [AI_QUEUED] "queued", \
                          [AI_RUNNING] "running", [AI_DONE] "done", \
                          [AI_FAILED] "failed" }

// error codes: ai_status.err, and the reason of the caller's last failed AI
// system call, which every AI call records and ai_lasterr() returns (all AI
// calls return -1 on any error, like every other system call)
#define AI_OK           0
#define AI_EINVAL       1     // bad argument (count, predict, pointer, flags)
#define AI_ERANGE       2     // a token id >= the model's vocabulary
#define AI_ETOOLONG     3     // prompt + predict > the model's context
#define AI_ENODEV       4     // no AI device, or no model loaded
#define AI_EBUSY        5     // every slot taken and AI_NONBLOCK given
#define AI_EPERM        6     // reqid not owned by the caller (or unknown)
#define AI_ESMALL       7     // out_cap too small; the result is kept
#define AI_EWORKER      8     // the worker died while running the request
#define AI_EDEVICE      9     // the device failed the request
#define AI_EKILLED      10    // the caller was killed while sleeping
#define AI_ECANCELED    11    // cancelled (owner exited)
#define AI_ETIMEDOUT    12    // ai_read: nothing new within the timeout
#define AI_ENET         13    // the remote inference server is unreachable
#define AI_ESLOW        14    // the remote inference server did not answer in time
#define AI_EPROTO       15    // the remote inference server answered garbage
#define AI_EOVERLOAD    16    // the remote inference server is overloaded (retried)

// ai_submit_args.flags
#define AI_NONBLOCK     0x1   // fail with AI_EBUSY instead of sleeping
#define AI_STOP_EOS     0x2   // stop early at the model's end-of-sequence token
#define AI_NO_SPEC      0x4   // one token per decode step: no speculative decoding

// arguments of ai_submitx(); the ulib's ai_submit(t, n, p) fills the rest
// with defaults (greedy, blocking, exactly p tokens)
struct ai_submit_args {
  uint64 tokens;        // user address of uint32 tokens[ntokens]
  int ntokens;          // 1 .. AI_MAX_TOKENS
  int npredict;         // 1 .. AI_MAX_PREDICT
  int flags;            // AI_NONBLOCK | AI_STOP_EOS | AI_NO_SPEC
  uint32 seed;          // sampling seed
  uint32 temp_milli;    // temperature x 1000; 0 = greedy
  uint32 top_k;         // 0 = off
  uint32 top_p_milli;   // top-p x 1000; 0 or 1000 = off
  uint32 speculate;     // drafted tokens a decode step verifies at most: 0 = the
                        // device's default, 1..AI_MAX_SPECULATE (AI_NO_SPEC: none)
};

// a snapshot of one request (ai_query)
struct ai_status {
  int reqid;
  int state;            // AI_FREE .. AI_FAILED
  int err;              // AI_OK or an AI_E* code
  int ntokens;          // prompt tokens
  int npredict;         // tokens asked for
  int ngenerated;       // tokens generated so far (live while RUNNING)
  int ncached;          // prompt tokens the device's prefix cache held (once DONE)
  int nsteps;           // decode steps after the first token (once DONE): with
                        // speculative decoding (ngenerated - 1) / nsteps tokens a step
  int result_len;       // bytes of the result text once DONE (excl. NUL)
  int owner;            // pid of the submitter
  // guest time in microseconds since boot, the clock of time_us(); 0 = not yet
  uint64 t_submit;      // ai_submit entered the kernel
  uint64 t_dispatch;    // a worker took it from the queue
  uint64 t_accept;      // the device accepted it
  uint64 t_first;       // the device produced the first token
  uint64 t_done;        // the device finished
};

// what ai_worker_get hands a worker
struct ai_work {
  int reqid;
  int ntokens;
  int npredict;
  int owner;
};

// the device's prefix cache (ai_info.cache): the counters of the course's
// `aitest --cacheprobe` line, read from the VIRTIO_AI_CACHE registers
struct ai_cache {
  uint32 valid;         // 1 if anything is cached
  uint32 prefix_len;    // prompt tokens the latest request took from the cache
  uint32 hits;          // requests that reused a prefix
  uint32 misses;        // requests that looked and found none
  uint32 restores;      // requests whose state was loaded from it (one per hit)
  uint32 saves;         // requests that put something into it
  uint32 bypasses;      // requests that did not use it (off, a one-token prompt)
  uint32 evictions;     // entries dropped to stay within the budget
  uint32 blocks;        // entries held now (blocks of kv_block tokens, and tails)
  uint32 kib;           // KiB held now
};

// the AI device and its model (ai_info)
struct ai_info {
  int present;          // 1 if the AI device exists
  int state;            // AI_DEV_* (virtio_ai.h): no model / loading / ready / failed
  uint32 vocab_size;
  uint32 max_context;
  uint32 eos_token;
  uint32 flags;         // AI_CFG_SYNTHETIC: weights are random (label results!)
  uint64 n_params;
  uint64 weight_bytes;
  uint64 load_us;       // Model Loading Time measured by the device
  char name[32];        // model's display name (its metadata), e.g. "Qwen3.5-0.8B"
  char arch[16];        // "llama" or "qwen3_5"
  int workers;          // ai_daemon workers registered now
  int kv_block;         // tokens per prefix cache block
  uint64 kv_cache_bytes; // prefix cache budget (0 = off)
  struct ai_cache cache;
  uint64 repack_us;     // of load_us: the one-time int8 repack (0: its cache was mapped)
};

// service counters (ai_stats), for leak checks and the benchmarks, and who
// the workers are (a second ai_daemon names the one already running)
struct ai_stats {
  int slots[5];         // slots in each state, indexed by AI_FREE .. AI_FAILED
  int queued;           // requests in the circular queue
  int workers;          // registered workers
  int orphans;          // running requests whose owner has exited
  int worker_pid[AI_MAX_WORKERS]; // who the registered workers are (0: none)
  uint64 submitted;     // totals since boot
  uint64 completed;
  uint64 failed;
  uint64 next_id;       // the next request id (ids are never reused)
};
