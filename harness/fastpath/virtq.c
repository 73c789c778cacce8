// virtq.c: a virtio device's QUEUE_NOTIFY in C: the split virtqueue's new chains walked
// here (VirtioMmio._notify and _walk, harness/devices/virtio_mmio.py, stay the
// specification) and each handed to the device's Python handle() through fp_py_chain.
//
// Only a chain _walk would take as it is comes this way: any problem (an index past the
// queue, an unknown flag, a buffer outside RAM, a readable descriptor after a writable
// one, a loop, more than FP_CHAIN_MAX descriptors, the avail index too far ahead) leaves
// that chain and the rest to Python's _notify, which reports it in its own words. The
// avail index the device has reached (last_avail) lives here while the queue is enabled:
// Python's Virtqueue reads and writes this one.

#include <string.h>

#include "mmio.h"

// the queue's RAM at guest physical pa, n bytes, or NULL if not all inside RAM
static const uint8_t *at(const struct fp_virtq *q, uint64_t pa, uint64_t n)
{
    if (pa < q->ram_base || n > q->ram_size || pa - q->ram_base > q->ram_size - n)
        return 0;
    return q->ram + (pa - q->ram_base);
}

static int u16_at(const struct fp_virtq *q, uint64_t pa, uint16_t *v)
{
    const uint8_t *p = at(q, pa, 2);
    if (!p)
        return 0;
    memcpy(v, p, 2);  // little-endian guest and host
    return 1;
}

// VirtioMmio._walk of the chain at head into q's chain fields; 0 if Python must walk it
static int walk(struct fp_virtq *q, uint32_t head)
{
    uint32_t idx = head, n = 0, nread = 0;
    for (uint32_t i = 0; i < q->num && n < FP_CHAIN_MAX; i++) {
        const uint8_t *d = idx < q->num ? at(q, q->desc + 16ull * idx, 16) : 0;
        if (!d)
            return 0;
        uint64_t addr;
        uint32_t len;
        uint16_t flags, next;
        memcpy(&addr, d, 8);
        memcpy(&len, d + 8, 4);
        memcpy(&flags, d + 12, 2);
        memcpy(&next, d + 14, 2);
        if ((flags & ~(q->f_next | q->f_write)) || !at(q, addr, len))
            return 0;
        if (!(flags & q->f_write)) {
            if (n > nread)
                return 0;  // readable after a writable one
            nread++;
        }
        q->addr[n] = addr;
        q->len[n] = len;
        n++;
        if (!(flags & q->f_next)) {
            q->head = head;
            q->n = n;
            q->nread = nread;
            return 1;
        }
        idx = next;
    }
    return 0;  // a loop, or longer than FP_CHAIN_MAX
}

int fp_virtq_notify(struct fp_window *w, struct fp_virtq *q)
{
    uint16_t avail_idx, head;
    if (!u16_at(q, q->avail + 2, &avail_idx)
        || (uint16_t)(avail_idx - q->last_avail) > q->num)
        return 0;
    while (q->last_avail != avail_idx) {
        if (!u16_at(q, q->avail + 4 + 2ull * (q->last_avail % q->num), &head) || !walk(q, head))
            return 0;  // Python's _notify goes on from this chain
        q->last_avail = (q->last_avail + 1) & 0xFFFF;
        q->chains++;
        if (fp_py_chain(w->bus->handle, w->index))
            return 1;  // a fault or error: the run stops after this access
    }
    q->notifies++;
    return 1;
}
