// virtio_ai.c: driver for the virtio-mmio (version 2) AI inference device
// at VIRTIO1 (harness/devices/virtio_ai.py; registers and structs in
// virtio.h and virtio_ai.h).
//
// One virtqueue of VIRTIO_AI_QUEUE_NUM descriptors, cut into NCHAIN fixed
// chains of four: chain i always uses descriptors 4i .. 4i+3, so there is
// no descriptor allocator. Each chain has its own DMA buffers (struct
// chain) for the request header, the prompt, the generated ids and the
// response. A chain belongs to the device from virtio_ai_start() until the
// device puts it on the used ring; its buffers stay untouched that long,
// even if the process that asked for it has died (the chain is then
// "abandoned" and freed here when the device returns it).
//
// The device may be missing (no --model): bootinfo says so, and then this
// file touches no register at all and virtio_ai_present() is 0.
//
// Locking: every function here except virtio_ai_init() runs with ai_lock
// (ai_service.c) held; the interrupt handler takes it.

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "riscv.h"
#include "spinlock.h"
#include "bootinfo.h"
#include "virtio.h"
#include "ai.h"
#include "virtio_ai.h"
#include "ai_slots.h"
#include "defs.h"

#define R(r) ((volatile uint32 *)(VIRTIO1 + (r)))

#define QN      VIRTIO_AI_QUEUE_NUM   // descriptors in the queue
#define NCHAIN  (QN / 4)              // request chains in flight at most

// the split-virtqueue rings at our queue size (virtio.h's are for
// VIRTIO_NUM descriptors)
struct aiq_avail {
  uint16 flags;
  uint16 idx;
  uint16 ring[QN];
  uint16 unused;
};

struct aiq_used {
  uint16 flags;
  uint16 idx;
  struct virtq_used_elem ring[QN];
  uint16 unused;
};

// the DMA buffers of one request chain
struct chain {
  struct ai_dev_req req;        // [0] device reads
  struct ai_dev_resp resp;      // [3] device writes
  uint32 tokens[AI_MAX_TOKENS]; // [1] device reads
  uint32 out[AI_MAX_PREDICT];   // [2] device writes
  int busy;                     // the device has it
  int slot;                     // the service slot waiting for it, or -1
  int used;                     // taken (busy, or returned and not released)
};

static struct chain chains[NCHAIN];

static struct {
  int present;
  uint32 features;              // negotiated VIRTIO_AI_F_* bits
  struct virtq_desc *desc;
  struct aiq_avail *avail;
  struct aiq_used *used;
  uint16 used_idx;              // how far we have read used->ring
  struct virtio_ai_config cfg;  // the model, as last read from the device
  uint32 cfggen;                // CONFIG_GENERATION when cfg was read
  int readers;                  // ai_read callers waiting for progress
} dev;

static void virtio_ai_intr(void);

// Give up on the device: tell it, say why, and carry on without it.
static void
fail(char *why)
{
  *R(VIRTIO_MMIO_STATUS) = *R(VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_FAILED;
  printf("virtio_ai: %s; no AI device\n", why);
}

// Read the config space into dev.cfg, again if it changed while we read
// (virtio 1.1, 2.4.1). Returns 1 if the model state changed.
static int
readcfg(void)
{
  uint32 gen, *w = (uint32 *)&dev.cfg, old = dev.cfg.state;
  int i;

  do {
    gen = *R(VIRTIO_MMIO_CONFIG_GENERATION);
    for(i = 0; i < sizeof(dev.cfg) / 4; i++)
      w[i] = *R(VIRTIO_MMIO_CONFIG + 4 * i);
  } while(gen != *R(VIRTIO_MMIO_CONFIG_GENERATION));
  dev.cfggen = gen;
  dev.cfg.name[sizeof(dev.cfg.name) - 1] = 0;
  dev.cfg.arch[sizeof(dev.cfg.arch) - 1] = 0;
  return dev.cfg.state != old;
}

// Find, reset and configure the device (virtio 1.1, 3.1.1) if bootinfo
// says there is one.
void
virtio_ai_init(void)
{
  uint32 status = 0, features, max;
  int i;

  if(!(bootinfo.flags & BOOT_F_AIDEV))
    return;
  if(*R(VIRTIO_MMIO_MAGIC_VALUE) != VIRTIO_MAGIC ||
     *R(VIRTIO_MMIO_VERSION) != VIRTIO_VERSION ||
     *R(VIRTIO_MMIO_DEVICE_ID) != VIRTIO_ID_AI){
    printf("virtio_ai: no AI device at 0x%lx\n", VIRTIO1);
    return;
  }

  *R(VIRTIO_MMIO_STATUS) = status;              // reset
  status |= VIRTIO_STATUS_ACKNOWLEDGE;
  *R(VIRTIO_MMIO_STATUS) = status;
  status |= VIRTIO_STATUS_DRIVER;
  *R(VIRTIO_MMIO_STATUS) = status;

  // bits 0..31: take every AI feature offered (each only adds to what
  // the device does)
  *R(VIRTIO_MMIO_DEVICE_FEATURES_SEL) = 0;
  features = *R(VIRTIO_MMIO_DEVICE_FEATURES) &
             ((1 << VIRTIO_AI_F_PROGRESS) | (1 << VIRTIO_AI_F_SAMPLING) |
              (1 << VIRTIO_AI_F_CANCEL) | (1 << VIRTIO_AI_F_PROGRESS_IRQ));
  *R(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 0;
  *R(VIRTIO_MMIO_DRIVER_FEATURES) = features;
  dev.features = features;
  // bits 32..63: VIRTIO_F_VERSION_1 is required
  *R(VIRTIO_MMIO_DEVICE_FEATURES_SEL) = 1;
  if(!(*R(VIRTIO_MMIO_DEVICE_FEATURES) & (1 << (VIRTIO_F_VERSION_1 - 32)))){
    fail("VIRTIO_F_VERSION_1 not offered");
    return;
  }
  *R(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 1;
  *R(VIRTIO_MMIO_DRIVER_FEATURES) = 1 << (VIRTIO_F_VERSION_1 - 32);

  status |= VIRTIO_STATUS_FEATURES_OK;
  *R(VIRTIO_MMIO_STATUS) = status;
  if(!(*R(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK)){
    fail("FEATURES_OK not accepted");
    return;
  }

  // queue 0: the requests
  *R(VIRTIO_MMIO_QUEUE_SEL) = 0;
  if(*R(VIRTIO_MMIO_QUEUE_READY)){
    fail("queue 0 already in use");
    return;
  }
  max = *R(VIRTIO_MMIO_QUEUE_NUM_MAX);
  if(max < QN){
    fail("queue 0 too short");
    return;
  }
  dev.desc = kalloc();
  dev.avail = kalloc();
  dev.used = kalloc();
  if(!dev.desc || !dev.avail || !dev.used)
    panic("virtio_ai_init: out of memory");
  memset(dev.desc, 0, PGSIZE);
  memset(dev.avail, 0, PGSIZE);
  memset(dev.used, 0, PGSIZE);

  *R(VIRTIO_MMIO_QUEUE_NUM) = QN;
  *R(VIRTIO_MMIO_QUEUE_DESC_LOW) = (uint64)dev.desc;
  *R(VIRTIO_MMIO_QUEUE_DESC_HIGH) = (uint64)dev.desc >> 32;
  *R(VIRTIO_MMIO_DRIVER_DESC_LOW) = (uint64)dev.avail;
  *R(VIRTIO_MMIO_DRIVER_DESC_HIGH) = (uint64)dev.avail >> 32;
  *R(VIRTIO_MMIO_DEVICE_DESC_LOW) = (uint64)dev.used;
  *R(VIRTIO_MMIO_DEVICE_DESC_HIGH) = (uint64)dev.used >> 32;
  *R(VIRTIO_MMIO_QUEUE_READY) = 1;

  for(i = 0; i < NCHAIN; i++)
    chains[i].slot = -1;

  irq_register(VIRTIO1_IRQ, virtio_ai_intr);
  dev.present = 1;
  status |= VIRTIO_STATUS_DRIVER_OK;
  *R(VIRTIO_MMIO_STATUS) = status;
  // from DRIVER_OK on, every model change raises a config interrupt, so
  // what we read now stays current
  readcfg();
}

int
virtio_ai_present(void)
{
  return dev.present;
}

// Does the device honour temperature, top-k and top-p?
int
virtio_ai_sampling(void)
{
  return (dev.features >> VIRTIO_AI_F_SAMPLING) & 1;
}

// The loaded model (state, vocabulary, context, ...): our copy. The
// config-change interrupt keeps it current; refresh also checks the
// device's CONFIG_GENERATION (one register read, where re-reading the
// whole config space costs 28) and re-reads it if it changed.
struct virtio_ai_config*
virtio_ai_model(int refresh)
{
  if(refresh && dev.present &&
     *R(VIRTIO_MMIO_CONFIG_GENERATION) != dev.cfggen && readcfg())
    ai_model_changed();
  return &dev.cfg;
}

// The device's prefix-cache counters, one register per field.
void
virtio_ai_cache(struct ai_cache *c)
{
  uint32 *w = (uint32 *)c;

  for(int i = 0; i < sizeof(*c) / sizeof(uint32); i++)
    w[i] = dev.present ? *R(VIRTIO_AI_CACHE + 4 * i) : 0;
}

// Write one event of a request's life to the trace register.
void
virtio_ai_trace(int event, int id)
{
  if(dev.present)
    *R(VIRTIO_AI_TRACE) = ((uint32)event << 24) | ((uint32)id & 0xffffff);
}

// One more (delta 1) or one fewer (-1) ai_read waits for progress. The
// device raises progress interrupts only while there is one: a request
// nobody streams decodes without interrupting anyone. The caller holds
// ai_lock and, after adding itself, looks at resp.ngenerated once more
// before it sleeps (an update before this write raised no interrupt).
void
virtio_ai_want_progress(int delta)
{
  int before = dev.readers;

  dev.readers += delta;
  if(dev.present && (before == 0) != (dev.readers == 0))
    *R(VIRTIO_AI_PROGRESS_WANT) = dev.readers != 0;
}

// Describe chain c's four buffers and offer it to the device.
static void
offer(struct chain *c, int c_idx, int ntokens, int npredict)
{
  struct virtq_desc *d = &dev.desc[4 * c_idx];

  d[0].addr = (uint64)&c->req;
  d[0].len = sizeof(c->req);
  d[0].flags = VRING_DESC_F_NEXT;
  d[0].next = 4 * c_idx + 1;

  d[1].addr = (uint64)c->tokens;
  d[1].len = ntokens * sizeof(uint32);
  d[1].flags = VRING_DESC_F_NEXT;
  d[1].next = 4 * c_idx + 2;

  d[2].addr = (uint64)c->out;
  d[2].len = npredict * sizeof(uint32);
  d[2].flags = VRING_DESC_F_WRITE | VRING_DESC_F_NEXT;
  d[2].next = 4 * c_idx + 3;

  d[3].addr = (uint64)&c->resp;
  d[3].len = sizeof(c->resp);
  d[3].flags = VRING_DESC_F_WRITE;
  d[3].next = 0;

  // the response says "not finished" until the device writes it
  memset(&c->resp, 0, sizeof(c->resp));
  c->resp.status = AI_ST_RUNNING;
  c->busy = 1;
  c->used = 1;

  // the device must see the descriptors before the index, and the index
  // before the notify
  dev.avail->ring[dev.avail->idx % QN] = 4 * c_idx;
  __sync_synchronize();
  dev.avail->idx += 1;
  __sync_synchronize();
  *R(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;
}

static int
alloc_chain(void)
{
  int i;

  for(i = 0; i < NCHAIN; i++)
    if(!chains[i].used)
      return i;
  return -1;
}

// Start slot s (index slot) on the device. Returns the chain, or -1 if
// every chain is taken (the caller sleeps and retries).
int
virtio_ai_start(struct aislot *s, int slot)
{
  struct chain *c;
  int i;

  if((i = alloc_chain()) < 0)
    return -1;
  c = &chains[i];
  memset(&c->req, 0, sizeof(c->req));
  c->req.type = AI_REQ_GENERATE;
  c->req.id = s->id;
  c->req.ntokens = s->ntokens;
  c->req.npredict = s->npredict;
  c->req.flags = s->flags;
  c->req.seed = s->seed;
  c->req.temp_milli = s->temp_milli;
  c->req.top_k = s->top_k;
  c->req.top_p_milli = s->top_p_milli;
  c->req.speculate = s->speculate;
  memmove(c->tokens, s->tokens, s->ntokens * sizeof(uint32));
  c->slot = slot;
  offer(c, i, s->ntokens, s->npredict);
  return i;
}

// Ask the device to stop the request on chain ci early (best effort: a
// device without AI_F_CANCEL, or no free chain for the cancel request,
// lets it run to its end). The request's chain comes back as usual.
void
virtio_ai_cancel(int ci)
{
  struct chain *c;
  int i;

  if(!(dev.features & (1 << VIRTIO_AI_F_CANCEL)) || !chains[ci].busy)
    return;
  if((i = alloc_chain()) < 0)
    return;
  c = &chains[i];
  memset(&c->req, 0, sizeof(c->req));
  c->req.type = AI_REQ_CANCEL;
  c->req.target = chains[ci].req.id;
  c->slot = -1;
  offer(c, i, 0, 0);
}

// Is chain ci still on the device?
int
virtio_ai_busy(int ci)
{
  return chains[ci].busy;
}

// The response and generated ids of chain ci (once it is back).
struct ai_dev_resp*
virtio_ai_resp(int ci)
{
  return &chains[ci].resp;
}

uint32*
virtio_ai_out(int ci)
{
  return chains[ci].out;
}

// Live progress of the request on chain ci, for ai_query.
void
virtio_ai_progress(int ci, int *ngenerated, uint64 *t_accept, uint64 *t_first)
{
  volatile struct ai_dev_resp *r = &chains[ci].resp;

  *ngenerated = r->ngenerated;
  *t_accept = r->t_accept;
  *t_first = r->t_first;
}

// The service is done with chain ci, which the device has returned.
void
virtio_ai_release(int ci)
{
  struct chain *c = &chains[ci];

  if(c->busy)
    panic("virtio_ai_release: chain %d is still on the device", ci);
  c->used = 0;
  c->slot = -1;
}

// Nobody waits for chain ci any more (its worker died): cancel it on the
// device and free it when it comes back, or now if it is back already.
void
virtio_ai_abandon(int ci)
{
  struct chain *c = &chains[ci];

  c->slot = -1;
  if(c->busy)
    virtio_ai_cancel(ci);
  else
    virtio_ai_release(ci);
}

// The device finished chains, wrote more ids, or changed its model.
static void
virtio_ai_intr(void)
{
  struct virtq_used_elem *e;
  struct chain *c;
  uint32 isr;
  int head, freed = 0;

  acquire(&ai_lock);

  // acknowledge first, so a completion that lands while we scan raises a
  // new interrupt instead of being lost
  isr = *R(VIRTIO_MMIO_INTERRUPT_STATUS);
  *R(VIRTIO_MMIO_INTERRUPT_ACK) = isr & (VIRTIO_INT_USED_RING | VIRTIO_INT_CONFIG |
                                         VIRTIO_AI_INT_PROGRESS);
  __sync_synchronize();

  // wake every running request's readers (ai_read re-checks its own)
  if(isr & VIRTIO_AI_INT_PROGRESS)
    for(head = 0; head < NCHAIN; head++)
      if(chains[head].busy && chains[head].slot >= 0)
        ai_progress(chains[head].slot);

  if((isr & VIRTIO_INT_CONFIG) && readcfg())
    ai_model_changed();

  while(dev.used_idx != dev.used->idx){
    __sync_synchronize();
    e = &dev.used->ring[dev.used_idx % QN];
    head = e->id;
    dev.used_idx += 1;
    if(head % 4 != 0 || head >= QN || !chains[head / 4].busy){
      printf("virtio_ai: device returned descriptor %d, not a chain it had\n",
             head);
      continue;
    }
    c = &chains[head / 4];
    c->busy = 0;
    if(c->slot >= 0){
      ai_chain_done(c->slot);   // its worker collects the result
    } else {
      virtio_ai_release(head / 4);  // a cancel, or abandoned
      freed = 1;
    }
  }
  if(freed)
    ai_chain_freed();

  release(&ai_lock);
}
