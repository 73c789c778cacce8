// mmio.c: the MMIO bus in C and the hot device registers (see mmio.h). Each function
// says which Python function it mirrors; the Python one stays the specification.

#include "hostclock.h"
#include "mmio.h"
#include "unicorn_api.h"

#define PRIV_MACHINE 3

// Hart.set_mip: mip is an M-mode CSR, so PRIV is switched to M around the access
void fp_set_mip(void *uc, void *reg_read, void *reg_write, uint64_t mask, int level)
{
    uc_reg_read_fn rd = (uc_reg_read_fn)reg_read;
    uc_reg_write_fn wr = (uc_reg_write_fn)reg_write;
    uint64_t priv = 0, mip = 0, m = PRIV_MACHINE;
    rd(uc, REG_PRIV, &priv);
    if (priv != PRIV_MACHINE)
        wr(uc, REG_PRIV, &m);
    rd(uc, REG_MIP, &mip);
    mip = level ? mip | mask : mip & ~mask;
    wr(uc, REG_MIP, &mip);
    if (priv != PRIV_MACHINE)
        wr(uc, REG_PRIV, &priv);
}

// Plic._best
static uint32_t plic_best(struct fp_plic *p, int h)
{
    uint32_t cand = p->line & ~p->claimed & p->enables[h];
    uint32_t best = 0, prio = p->thresholds[h];
    while (cand) {
        uint32_t src = __builtin_ctz(cand);
        cand &= cand - 1;
        if (p->priority[src] > prio) {
            best = src;
            prio = p->priority[src];
        }
    }
    return best;
}

// Plic._update
static void plic_update(struct fp_plic *p)
{
    for (int h = 0; h < p->nharts; h++) {
        uint8_t out = plic_best(p, h) != 0;
        if (out != p->out[h]) {
            p->out[h] = out;
            fp_set_mip(p->uc[h], p->reg_read, p->reg_write, p->seip, out);
        }
    }
}

// Plic.set_line
void fp_plic_set_line(struct fp_plic *p, uint32_t src, int level)
{
    if (level)
        p->line |= 1u << src;
    else
        p->line &= ~(1u << src);
    plic_update(p);
}

// the hart whose claim/complete register offset is, or -1
static int plic_context(struct fp_plic *p, uint64_t offset, uint32_t size)
{
    if (size != 4 || offset < p->sclaim || (offset - p->sclaim) % p->cstride)
        return -1;
    uint64_t h = (offset - p->sclaim) / p->cstride;
    return h < (uint64_t)p->nharts ? (int)h : -1;
}

// Plic.read, SCLAIM: claim the best pending source
static int plic_read(struct fp_plic *p, uint64_t offset, uint32_t size, uint64_t *value)
{
    int h = plic_context(p, offset, size);
    if (h < 0)
        return 0;
    uint32_t src = plic_best(p, h);
    if (src) {
        p->claimed |= 1u << src;
        p->claims++;
        plic_update(p);
    }
    *value = src;
    p->fast++;
    return 1;
}

// Plic.write, SCLAIM: complete a source (an unclaimed or out-of-range one is ignored)
static int plic_write(struct fp_plic *p, uint64_t offset, uint32_t size, uint64_t value)
{
    if (plic_context(p, offset, size) < 0)
        return 0;
    value &= 0xFFFFFFFFu;
    if (value > 0 && value < FP_NSOURCES)
        p->claimed &= ~(1u << value);
    plic_update(p);
    p->fast++;
    return 1;
}

// Uart16550.read, LSR: the transmitter is always idle
static int uart_read(struct fp_uart *u, uint64_t offset, uint32_t size, uint64_t *value)
{
    if (offset != u->lsr || size != 1)
        return 0;
    *value = u->lsr_idle | (u->rx_ready ? u->lsr_dr : 0);
    u->fast++;
    return 1;
}

// Uart16550.write, THR: while the THR-empty interrupt is off, a byte changes nothing but
// the output (the Python model re-arms that interrupt when IER enables it)
static int uart_write(struct fp_uart *u, uint64_t offset, uint32_t size, uint64_t value)
{
    if (offset != u->thr || size != 1 || (u->lcr & u->dlab) || (u->ier & u->etbei)
        || u->tapped || u->n >= FP_TXBUF)
        return 0;
    u->buf[u->n++] = (uint8_t)value;
    u->tx++;
    u->fast++;
    return 1;
}

// VirtioMmio._update_irq
static void virtio_update(struct fp_virtio *v)
{
    uint8_t line = v->isr != 0;
    if (line != v->line) {
        v->line = line;
        fp_plic_set_line(v->plic, v->src, line);
    }
}

// VirtioMmio.read, INTERRUPT_STATUS
static int virtio_read(struct fp_virtio *v, uint64_t offset, uint32_t size, uint64_t *value)
{
    if (offset != v->isr_off || size != 4)
        return 0;
    *value = v->isr;
    v->fast++;
    return 1;
}

// VirtioAi.write, TRACE: the event and the time, for VirtioAi._drain
static int trace_write(struct fp_trace *t, uint64_t offset, uint32_t size, uint64_t value)
{
    if (!t || !t->enabled || offset != t->off || size != 4 || t->n >= FP_TRACE)
        return 0;
    t->word[t->n] = (uint32_t)value;
    t->mtime[t->n] = fp_host_mtime(t->t0_ns, t->hz);
    t->n++;
    return 1;
}

// VirtioMmio.write, INTERRUPT_ACK, and QUEUE_NOTIFY of queue 0 (virtq.c)
static int virtio_write(struct fp_window *w, struct fp_virtio *v, uint64_t offset,
                        uint32_t size, uint64_t value)
{
    if (trace_write(v->trace, offset, size, value)) {
        v->fast++;
        return 1;
    }
    if (v->vq && v->vq->enabled && offset == v->vq->notify_off && size == 4 && value == 0)
        return fp_virtq_notify(w, v->vq);
    if (offset != v->ack_off || size != 4)
        return 0;
    v->isr &= ~(uint32_t)value;
    virtio_update(v);
    v->fast++;
    return 1;
}

// MmioBus._record: an 8-byte access arrives as two 4-byte ones, low word first
static void record(struct fp_window *w, uint64_t offset, uint32_t size, int write,
                   uint64_t value)
{
    struct fp_bus *b = w->bus;
    struct fp_access a = {w->index, (uint32_t)offset, size, (uint32_t)write, value};
    b->accesses++;
    struct fp_access *l = &b->last[0];
    if (b->nlast == 1 && l->win == a.win && l->write == a.write && size == 4 && l->size == 4
        && a.offset == l->offset + 4) {
        b->last[1] = a;
        b->nlast = 2;
    } else {
        b->last[0] = a;
        b->nlast = 1;
    }
}

static uint64_t on_read(void *uc, uint64_t offset, unsigned size, void *user)
{
    struct fp_window *w = user;
    uint64_t value = 0;
    int done = 0;
    if (w->kind == FP_WIN_UART)
        done = uart_read(w->dev, offset, size, &value);
    else if (w->kind == FP_WIN_PLIC)
        done = plic_read(w->dev, offset, size, &value);
    else if (w->kind == FP_WIN_VIRTIO)
        done = virtio_read(w->dev, offset, size, &value);
    else if (w->kind == FP_WIN_CLINT)
        done = fp_clint_read(w, offset, size, &value);
    if (!done && fp_py_mmio(w->bus->handle, w->index, offset, size, 0, 0, &value))
        return 0;  // a DeviceError: the run stops after this access
    record(w, offset, size, 0, value);
    return value;
}

static void on_write(void *uc, uint64_t offset, unsigned size, uint64_t value, void *user)
{
    struct fp_window *w = user;
    int done = 0;
    if (w->kind == FP_WIN_UART)
        done = uart_write(w->dev, offset, size, value);
    else if (w->kind == FP_WIN_PLIC)
        done = plic_write(w->dev, offset, size, value);
    else if (w->kind == FP_WIN_VIRTIO)
        done = virtio_write(w, w->dev, offset, size, value);
    else if (w->kind == FP_WIN_CLINT)
        done = fp_clint_write(w, offset, size, value);
    if (!done && fp_py_mmio(w->bus->handle, w->index, offset, size, 1, value, &value))
        return;
    record(w, offset, size, 1, value);
}

int fp_bus_map(struct fp_window *w, uint64_t base, uint64_t size)
{
    uc_mmio_map_fn map = (uc_mmio_map_fn)w->bus->mmio_map;
    return map(w->bus->uc, base, size, (void *)on_read, w, (void *)on_write, w);
}
