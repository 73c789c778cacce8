// virtio_ai.h: our virtio-mmio (version 2) AI inference device.
//
// The generic virtio-mmio registers, status bits and ring structs are in
// virtio.h; this file adds what is specific to the AI device. The device is
// harness/devices/virtio_ai.py (it reads this file; never retype a value),
// the driver is virtio_ai.c.
//
// One request is a chain of four descriptors:
//   [0] struct ai_dev_req        device reads
//   [1] uint32 tokens[ntokens]   device reads
//   [2] uint32 out[npredict]     device writes, token by token
//   [3] struct ai_dev_resp       device writes (progress, then the result)
// The device answers the notify write at once and computes on a host
// thread; the guest keeps running. While it runs, the device writes the
// ids into [2] and resp.ngenerated as they come (VIRTIO_AI_F_PROGRESS) and
// says so with a rate-limited progress interrupt (VIRTIO_AI_F_PROGRESS_IRQ)
// while the driver asks for one (VIRTIO_AI_PROGRESS_WANT), which wakes ai_read. When a request finishes the device puts
// the chain's head on the used ring and raises VIRTIO1_IRQ. All times are
// guest microseconds since boot ((mtime - bootinfo.boot_mtime) / 10), the
// clock of time_us().

#define VIRTIO_ID_AI            0x4149      // "AI"
#define VIRTIO_AI_VENDOR        0x4941584e  // "NXAI"
#define VIRTIO_AI_QUEUE_NUM     64          // QueueNumMax of the request queue

// device feature bits (beyond VIRTIO_F_VERSION_1, which is required)
#define VIRTIO_AI_F_PROGRESS    0   // resp.ngenerated/t_first updated while running
#define VIRTIO_AI_F_SAMPLING    1   // temperature / top-k / top-p honoured
#define VIRTIO_AI_F_CANCEL      2   // AI_REQ_CANCEL supported
#define VIRTIO_AI_F_PROGRESS_IRQ 3  // progress also raises VIRTIO_AI_INT_PROGRESS

// InterruptStatus bit (device-specific, beside VIRTIO_INT_USED_RING and
// VIRTIO_INT_CONFIG): more ids are in some running request's out[] and
// resp.ngenerated. Rate-limited: at most one per VIRTIO_AI_PROGRESS_US of
// guest time, and none while the last one is unacknowledged, so a fast model
// costs the guest at most 100 interrupts a second, however many requests
// run; and only while VIRTIO_AI_PROGRESS_WANT is non-zero. The completion
// itself always comes at once (VIRTIO_INT_USED_RING).
#define VIRTIO_AI_INT_PROGRESS  0x4
#define VIRTIO_AI_PROGRESS_US   10000

// config.state
#define AI_DEV_NOMODEL          0
#define AI_DEV_LOADING          1
#define AI_DEV_READY            2
#define AI_DEV_FAILED           3

// config.flags
#define AI_CFG_SYNTHETIC        0x1 // the weights are random: label every result

// device-specific config space at VIRTIO_MMIO_CONFIG (read as 32-bit words;
// a change bumps CONFIG_GENERATION and raises VIRTIO_INT_CONFIG)
struct virtio_ai_config {
  uint32 state;             // AI_DEV_*
  uint32 flags;             // AI_CFG_*
  uint32 vocab_size;
  uint32 max_context;       // prompt + generated tokens per request
  uint32 eos_token;
  uint32 n_layers;
  uint32 dim;
  uint32 max_inflight;      // requests the device works on at once
  uint64 n_params;
  uint64 weight_bytes;
  uint64 load_us;           // weights file -> ready, measured by the device
  char name[32];            // the model's display name, from its own metadata
  char arch[16];
  uint64 kv_cache_bytes;    // prefix cache budget (0 = off)
  uint32 kv_block;          // tokens per prefix cache block
  uint32 reserved;
  uint64 repack_us;         // of load_us: the one-time int8 repack (0: mapped from its cache)
};

// write-only trace register (device-specific, after the config struct):
// the kernel writes (event << 24) | reqid at each step of a request's life;
// the device time-stamps it for `harness run --trace`.
#define VIRTIO_AI_TRACE         0x200
#define AI_TR_SUBMIT            1   // ai_submit queued it
#define AI_TR_DISPATCH          2   // a worker took it
#define AI_TR_COMPLETE          3   // the kernel saw the device finish it
#define AI_TR_WAITED            4   // the owner's ai_wait returned it
#define AI_TR_FAILED            5   // failed (any reason)
#define AI_TR_FREED             6   // slot reclaimed without a wait (exit)
#define AI_TR_READ              7   // the owner's ai_read got its first ids

// write-only progress-interrupt request register (device-specific, after
// the trace register): non-zero while someone sleeps in ai_read waiting for
// ids, 0 (at reset too) when nobody does. It is virtio's event suppression
// (VIRTQ_AVAIL_F_NO_INTERRUPT) for progress: a request nobody streams costs
// the guest its one completion interrupt, not one per 10 ms of decode. The
// driver sets it before its last look at resp.ngenerated, so an update that
// lands between that look and its sleep still interrupts. While it is 0 the
// device also updates out[] and resp.ngenerated less often, at most once per
// VIRTIO_AI_PROGRESS_IDLE_US (what ai_query shows may be that old); setting
// it brings both up to date at once.
#define VIRTIO_AI_PROGRESS_WANT 0x204
#define VIRTIO_AI_PROGRESS_IDLE_US 100000

// read-only prefix-cache counters (device-specific, after the trace
// register): struct ai_cache (ai.h), one 32-bit register per field, in order
#define VIRTIO_AI_CACHE         0x210

// ai_dev_req.type
#define AI_REQ_GENERATE         1
#define AI_REQ_CANCEL           2   // stop request `target`; completes at once
#define AI_REQ_LOAD             3   // tokens descriptor holds a model name

struct ai_dev_req {
  uint32 type;              // AI_REQ_*
  uint32 id;                // the kernel's request id (echoed in traces)
  uint32 ntokens;
  uint32 npredict;
  uint32 flags;             // AI_STOP_EOS, AI_NO_SPEC (ai.h)
  uint32 seed;
  uint32 temp_milli;
  uint32 top_k;
  uint32 top_p_milli;
  uint32 target;            // AI_REQ_CANCEL: the id to cancel
  uint32 speculate;         // drafted tokens a step verifies at most, 0 = the
                            // device's default (flags AI_NO_SPEC: none)
};

// ai_dev_resp.status
#define AI_ST_RUNNING           0xff  // written at accept; final values below
#define AI_ST_OK                0
#define AI_ST_EINVAL            1   // malformed chain, bad lengths or counts
#define AI_ST_ERANGE            2   // token id >= vocab
#define AI_ST_ETOOLONG          3   // prompt + predict > context
#define AI_ST_ENOMODEL          4   // no model ready
#define AI_ST_EENGINE           5   // the engine raised
#define AI_ST_ECANCELED         6   // cancelled
#define AI_ST_EFAULT            7   // a buffer address outside RAM
// a remote engine (harness --engine URL: harness/engines/remote.py) failed
#define AI_ST_ENET              8   // the server is unreachable or dropped the stream
#define AI_ST_ESLOW             9   // nothing from the server within --engine-timeout
#define AI_ST_EPROTO            10  // the server's answer is not the API
#define AI_ST_EBUSY             11  // the server stayed overloaded (429/503) past the retries

struct ai_dev_resp {
  uint32 status;            // AI_ST_*
  uint32 ngenerated;        // tokens written to out[] so far
  uint64 t_accept;
  uint64 t_first;
  uint64 t_done;
  uint32 ncached;           // prompt tokens taken from the prefix cache
  uint32 nsteps;            // decode steps after the first token (speculative
                            // decoding takes several tokens in a step)
};
