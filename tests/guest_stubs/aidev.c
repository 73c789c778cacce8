// aidev.c: the AI device at VIRTIO1 driven by bare-metal guest code (no kernel).
//
// bootinfo.cmd = "[w] NPREDICT ID ID ..." ("w": only the wfi request, for
// timing the device with an idle guest). The stub negotiates VERSION_1 + PROGRESS,
// waits in wfi for the model (config interrupt), then runs the prompt twice:
// once busy-polling resp.ngenerated (the guest keeps running while the device
// computes, and sees the tokens stream in), once sleeping in wfi until the
// used-ring interrupt. A chain with a buffer outside RAM must come back with
// AI_ST_EFAULT. It prints what it saw; test_ai_device.py checks it.
#include "stub.h"
#include "bootinfo.h"
#include "virtio.h"
#include "virtio_ai.h"

#define REG(r) (*(volatile uint32 *)(VIRTIO1 + (r)))
#define NUM VIRTIO_NUM
#define MAXTOK 256

static struct virtq_desc desc[NUM] __attribute__((aligned(16)));
static struct virtq_avail avail __attribute__((aligned(2)));
static struct virtq_used used __attribute__((aligned(4)));
static struct ai_dev_req req;
static uint32 prompt[MAXTOK];
static uint32 out[MAXTOK];
static struct ai_dev_resp resp;
static volatile int config_irqs, used_irqs;

void
trap(struct frame *f)
{
  int irq = R32(PLIC_SCLAIM);
  if(irq == VIRTIO1_IRQ){
    uint32 st = REG(VIRTIO_MMIO_INTERRUPT_STATUS);
    REG(VIRTIO_MMIO_INTERRUPT_ACK) = st;
    if(st & VIRTIO_INT_CONFIG)
      config_irqs++;
    if(st & VIRTIO_INT_USED_RING)
      used_irqs++;
  }
  R32(PLIC_SCLAIM) = irq;
}

// Sleep in wfi while `cond` holds, without losing a wakeup: the check runs
// with interrupts off (wfi still wakes on a pending interrupt, which is taken
// once they are on again); counts the sleeps in `n`.
#define WAIT_WHILE(cond, n) do {                  \
    for(;;){                                      \
      csrc(sstatus, SSTATUS_SIE);                 \
      if(!(cond))                                 \
        break;                                    \
      asm volatile("wfi");                        \
      (n)++;                                      \
      csrs(sstatus, SSTATUS_SIE);                 \
    }                                             \
    csrs(sstatus, SSTATUS_SIE);                   \
  } while(0)

static uint32
cfg32(int off)
{
  return REG(VIRTIO_MMIO_CONFIG + off);
}

static const char *
num(const char *s, uint32 *v)
{
  while(*s == ' ')
    s++;
  if(*s < '0' || *s > '9')
    return 0;
  *v = 0;
  while(*s >= '0' && *s <= '9')
    *v = *v * 10 + (*s++ - '0');
  return s;
}

// put a 4-descriptor request on the ring and notify; returns the old used.idx
static uint16
submit(uint64 tokaddr, int ntok, int npredict)
{
  uint16 seen = used.idx;
  req.type = AI_REQ_GENERATE;
  req.id = 7;
  req.ntokens = ntok;
  req.npredict = npredict;
  resp.status = 0x1234;
  resp.ngenerated = 0;
  desc[0] = (struct virtq_desc){(uint64)&req, sizeof(req), VRING_DESC_F_NEXT, 1};
  desc[1] = (struct virtq_desc){tokaddr, 4 * ntok, VRING_DESC_F_NEXT, 2};
  desc[2] = (struct virtq_desc){(uint64)out, 4 * npredict,
                                VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 3};
  desc[3] = (struct virtq_desc){(uint64)&resp, sizeof(resp), VRING_DESC_F_WRITE, 0};
  avail.ring[avail.idx % NUM] = 0;
  __sync_synchronize();
  avail.idx++;
  __sync_synchronize();
  REG(VIRTIO_AI_TRACE) = (AI_TR_SUBMIT << 24) | req.id;
  REG(VIRTIO_MMIO_QUEUE_NOTIFY) = 0;
  return seen;
}

static void
show(const char *what, int n)
{
  puts(what);
  puts(" status ");
  putdec(resp.status);
  puts(" n ");
  putdec(resp.ngenerated);
  puts(" ids");
  for(int i = 0; i < resp.ngenerated && i < n; i++){
    putc(' ');
    putdec(out[i]);
  }
  puts(resp.t_accept <= resp.t_first && resp.t_first <= resp.t_done ? " times ok\n"
       : " times BAD\n");
}

int
main(uint64 hartid, struct bootinfo *bi)
{
  uint32 st = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER;
  uint32 npredict = 0;
  int ntok = 0;
  int wfi_only = bi->cmd[0] == 'w';
  const char *p = num(bi->cmd + wfi_only, &npredict);

  while(p && ntok < MAXTOK && (p = num(p, &prompt[ntok])) != 0)
    ntok++;
  if(npredict == 0 || npredict > MAXTOK || ntok == 0)
    return 2;
  csrw(stvec, trapvec);
  R32(PLIC_PRIORITY + VIRTIO1_IRQ * 4) = 1;
  R32(PLIC_SENABLE) = 1 << VIRTIO1_IRQ;
  csrs(sie, SIE_SEIE);
  csrs(sstatus, SSTATUS_SIE);
  if(REG(VIRTIO_MMIO_MAGIC_VALUE) != VIRTIO_MAGIC || REG(VIRTIO_MMIO_DEVICE_ID) != VIRTIO_ID_AI)
    return 3;
  REG(VIRTIO_MMIO_STATUS) = 0;
  REG(VIRTIO_MMIO_STATUS) = st;
  REG(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 0;
  REG(VIRTIO_MMIO_DRIVER_FEATURES) = 1 << VIRTIO_AI_F_PROGRESS;
  REG(VIRTIO_MMIO_DRIVER_FEATURES_SEL) = 1;
  REG(VIRTIO_MMIO_DRIVER_FEATURES) = 1 << (VIRTIO_F_VERSION_1 - 32);
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_FEATURES_OK;
  if(!(REG(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK))
    return 4;
  REG(VIRTIO_MMIO_QUEUE_SEL) = 0;
  REG(VIRTIO_MMIO_QUEUE_NUM) = NUM;
  REG(VIRTIO_MMIO_QUEUE_DESC_LOW) = (uint64)desc;
  REG(VIRTIO_MMIO_DRIVER_DESC_LOW) = (uint64)&avail;
  REG(VIRTIO_MMIO_DEVICE_DESC_LOW) = (uint64)&used;
  REG(VIRTIO_MMIO_QUEUE_READY) = 1;
  REG(VIRTIO_MMIO_STATUS) = st |= VIRTIO_STATUS_DRIVER_OK;

  // the model loads on a host thread while we wait here
  int sleeps = 0;
  WAIT_WHILE(cfg32(0) == AI_DEV_LOADING, sleeps);
  if(cfg32(0) != AI_DEV_READY)
    return 5;
  puts("ready ");
  for(int i = 0; i < 31; i++){
    char c = *(volatile char *)(VIRTIO1 + VIRTIO_MMIO_CONFIG
                                + __builtin_offsetof(struct virtio_ai_config, name) + i);
    if(c == 0)
      break;
    putc(c);
  }
  int lu = __builtin_offsetof(struct virtio_ai_config, load_us);
  puts(cfg32(lu) || cfg32(lu + 4) ? " load_us>0" : " load_us=0");
  // a model that loaded before DRIVER_OK raises no config interrupt
  puts(sleeps == 0 ? " at once\n" : config_irqs > 0 ? " config irq\n" : " no config irq\n");

  // 1: busy-poll the response while the device works
  uint16 seen;
  if(!wfi_only){
    seen = submit((uint64)prompt, ntok, npredict);
    uint32 last = 0, changes = 0;
    while(*(volatile uint16 *)&used.idx == seen){
      uint32 n = *(volatile uint32 *)&resp.ngenerated;
      if(n != last && n < npredict){    // a partial result: progress while running
        last = n;
        changes++;
      }
    }
    show("poll", npredict);
    puts(changes > 0 ? "progress seen\n" : "no progress seen\n");
  }

  // 2: sleep until the used-ring interrupt
  int irqs = used_irqs, waits = 0;
  seen = submit((uint64)prompt, ntok, npredict);
  WAIT_WHILE(*(volatile uint16 *)&used.idx == seen, waits);
  show("wfi", npredict);
  puts(used_irqs > irqs && waits > 0 ? "irq wake\n" : "no irq wake\n");

  // 3: a token buffer outside RAM
  seen = submit(0x1000, ntok, npredict);
  WAIT_WHILE(*(volatile uint16 *)&used.idx == seen, sleeps);
  puts(resp.status == AI_ST_EFAULT ? "efault ok\n" : "efault BAD\n");
  return 0;
}
