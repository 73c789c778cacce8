// mmio.h: the MMIO bus in C, with the hot registers that need no Python decision.
//
// Every device window of a hart is mapped with these callbacks (uc_mmio_map). A window
// whose device has C state (`kind`) serves its hot registers here: the UART's THR write
// and LSR read, the PLIC's claim/complete, a virtio device's InterruptStatus read and
// InterruptACK write, the AI device's trace register (a time-stamped event), and a virtio
// QUEUE_NOTIFY's chain walk (virtq.c, each chain to Python's take_chain through
// fp_py_chain). Everything else goes to the device's Python read/write through
// fp_py_mmio (harness/machine/bus_c.py), which stays the owner of device logic and of the
// errors (DeviceError). The C state is the device's own state, not a copy: the Python
// device objects read and write the same structs (harness/devices/plic.py,
// virtio_mmio.py), except the UART, whose IER/LCR/receive-ready the Python model mirrors
// here after each change (uart.py `_sync`). With the host clock the CLINT's mtime and
// mtimecmp are served here too (clint.c). Register offsets come from Python
// (kernel_c/memlayout.h, virtio_mmio.h through harness/abi/cheader.py), never from numbers here.
//
// The bus also records each hart's most recent MMIO instruction (both halves of a split
// 8-byte access), which harness/machine/bus.py's after_stop completes after a stop.
#ifndef HARNESS_MMIO_H
#define HARNESS_MMIO_H

#include <stdint.h>

// cffi:begin
#define FP_MAXHARTS 8    // kernel_c/bootinfo.h MAXCPU (harness/machine/bus_c.py checks both)
#define FP_NSOURCES 32   // harness/devices/plic.py NSOURCES
#define FP_TXBUF 4096
#define FP_TRACE 256

enum { FP_WIN_PYTHON, FP_WIN_UART, FP_WIN_PLIC, FP_WIN_VIRTIO, FP_WIN_CLINT };

struct fp_plic {                     // harness/devices/plic.py's state
    uint32_t priority[FP_NSOURCES];
    uint32_t line, claimed;          // bit i: source i's line is high / is claimed
    uint32_t enables[FP_MAXHARTS], thresholds[FP_MAXHARTS];
    uint8_t out[FP_MAXHARTS];        // SEIP of each hart as last driven
    uint64_t claims;
    int nharts;
    uint32_t sclaim, cstride;        // PLIC_SCLAIM - PLIC, PLIC_SCONTEXT_STRIDE
    uint64_t seip;                   // mip.SEIP
    void *uc[FP_MAXHARTS];           // each hart's uc_engine
    void *reg_read, *reg_write;
    uint64_t fast;                   // accesses served here
};

struct fp_uart {                     // the transmit side of harness/devices/uart.py
    uint8_t buf[FP_TXBUF];           // bytes written to THR, not yet taken by Python
    uint32_t n;
    uint64_t tx;                     // bytes C transmitted (ever)
    uint8_t ier, lcr, rx_ready;      // mirrored from the Python model
    uint8_t tapped;                  // every byte must reach Python's tx (Uart16550.tap)
    uint8_t thr, lsr, dlab, etbei;   // register offsets and bits (uart.py)
    uint8_t lsr_idle, lsr_dr;
    uint64_t fast;
};

struct fp_trace {                    // the AI device's trace register (virtio_ai.py)
    int enabled;                     // host clock: stamps are host mtime, taken here
    uint32_t off;                    // VIRTIO_AI_TRACE
    int64_t t0_ns;                   // HostClock.t0
    uint64_t hz;
    uint32_t n;                      // events not yet taken by Python (VirtioAi._drain)
    uint32_t word[FP_TRACE];         // the value written: (event << 24) | reqid
    uint64_t mtime[FP_TRACE];        // mtime at the write
};

#define FP_CHAIN_MAX 16

struct fp_virtq {                    // queue 0 of a virtio device, its chains walked here (virtq.c)
    int enabled;                     // DRIVER_OK and QUEUE_READY (VirtioMmio._sync_cq)
    uint32_t notify_off;             // QUEUE_NOTIFY
    uint32_t num;                    // queue size
    uint64_t desc, avail;            // guest physical: descriptor table, avail ring
    uint32_t last_avail;             // the device's next avail slot (Virtqueue.last_avail)
    uint16_t f_next, f_write;        // VRING_DESC_F_NEXT, VRING_DESC_F_WRITE
    uint8_t *ram;                    // PhysMem's host mapping
    uint64_t ram_base, ram_size;
    uint32_t head, n, nread;         // the chain handed to Python: n descriptors, the first
    uint64_t addr[FP_CHAIN_MAX];     // nread device-readable
    uint32_t len[FP_CHAIN_MAX];
    uint64_t notifies, chains;       // served here
};

struct fp_virtio {                   // harness/devices/virtio_mmio.py's interrupt state
    uint32_t isr;                    // InterruptStatus
    uint8_t line;                    // the level last driven to the PLIC
    uint32_t src;                    // its PLIC source
    uint32_t isr_off, ack_off;       // INTERRUPT_STATUS, INTERRUPT_ACK offsets
    struct fp_plic *plic;
    struct fp_trace *trace;          // the AI device's, or NULL
    struct fp_virtq *vq;             // queue 0's notify in C, or NULL
    uint64_t fast;
};

struct fp_clint {                    // harness/devices/clint.py's state (host clock only)
    uint64_t cmp[FP_MAXHARTS];       // mtimecmp of each hart
    uint8_t level[FP_MAXHARTS];      // STIP of each hart as last driven
    int nharts;
    int64_t t0_ns;                   // HostClock.t0
    uint64_t hz;
    uint32_t mtime_off, cmp_off, stride;  // CLINT_MTIME, CLINT_MTIMECMP (- CLINT), its stride
    uint64_t stip;                   // mip.STIP
    uint64_t latched;                // mtime sampled by a low-half read, for the high half
    int latched_ok;
    int64_t armed_ns;                // the running slice's deadline as the waker holds it
                                     // (harness/machine/waker.py; host monotonic ns, INT64_MAX none)
    void *uc[FP_MAXHARTS];           // each hart's uc_engine
    void *reg_read, *reg_write;
    uint64_t fast;                   // accesses served here
    uint64_t calls;                  // mtimecmp stores that had to tell Python (an earlier deadline)
};

struct fp_access {
    uint32_t win, offset, size, write;
    uint64_t value;
};

struct fp_bus;

struct fp_window {
    struct fp_bus *bus;
    uint32_t index;                  // in MmioBus.windows
    int kind;
    void *dev;                       // struct fp_uart / fp_plic / fp_virtio, by kind
};

struct fp_bus {                      // one hart's bus
    void *uc;
    void *handle;                    // the Python NativeBus (a cffi handle)
    void *mmio_map;                  // libunicorn's uc_mmio_map
    struct fp_access last[2];
    int nlast;
    uint64_t accesses;
};

int fp_bus_map(struct fp_window *w, uint64_t base, uint64_t size);
void fp_plic_set_line(struct fp_plic *p, uint32_t src, int level);
// virtq.c: a QUEUE_NOTIFY of queue 0 served (1), or 0 for Python's _notify
int fp_virtq_notify(struct fp_window *w, struct fp_virtq *q);
// Hart.set_mip on hart uc (mmio.c; also Hart.set_mip's own, with the C bus)
void fp_set_mip(void *uc, void *reg_read, void *reg_write, uint64_t mask, int level);
// cffi:end
// clint.c: a CLINT register served in C (1), or 0 for the Python device
int fp_clint_read(struct fp_window *w, uint64_t offset, uint32_t size, uint64_t *value);
int fp_clint_write(struct fp_window *w, uint64_t offset, uint32_t size, uint64_t value);

// the device's Python read/write (harness/machine/bus_c.py): 0 with *value set (a read),
// or 1 if it failed (the bus then stops the run and reports it)
int fp_py_mmio(void *handle, uint32_t win, uint64_t offset, uint32_t size, int write,
               uint64_t value, uint64_t *out);
// the CLINT's on_deadline (harness/machine/bus_c.py): a store moved a deadline earlier than
// the one the waker sleeps to
void fp_py_clint(void *handle, uint32_t win);
// VirtioMmio.take_chain (harness/machine/bus_c.py): the chain virtq.c walked into the
// device's fp_virtq; 0, or 1 if it failed (the run stops)
int fp_py_chain(void *handle, uint32_t win);

#endif
