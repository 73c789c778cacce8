// memlayout.h: the physical memory map of our machine.
//
// This file is the single source of truth shared by the kernel and the
// harness (harness/machine.py parses the #defines below; never retype them).
// Keep every value a plain integer literal or a simple sum so the parser can
// read it.
//
// The machine is modelled on QEMU's riscv "virt" board, but it is not that
// board: the harness is the firmware (there is no M-mode code at all), the
// kernel is entered directly in S-mode, and the timer raises the supervisor
// timer interrupt (STIP) itself because Unicorn cannot raise M-level ones.
//
//   0x00001000 -- boot info page, read-only, written by the harness
//                 (struct bootinfo in bootinfo.h)
//   0x00100000 -- power/reset device (sifive "test finisher" style)
//   0x02000000 -- CLINT-style timer: mtime and the S-mode deadline
//   0x0C000000 -- PLIC interrupt controller
//   0x10000000 -- UART 16550 console
//   0x10001000 -- virtio-mmio block device (the file system disk)
//   0x10002000 -- virtio-mmio AI device (the inference accelerator)
//   0x80000000 -- RAM, bootinfo.ram_size bytes (128 MiB by default)

#define BOOTINFO       0x00001000L

// power/reset: write POWER_PASS | (status << 16) to power off with an
// exit status, POWER_FAIL | (code << 16) to report failure (panic).
#define POWER          0x00100000L
#define POWER_FAIL     0x3333
#define POWER_PASS     0x5555
#define POWER_RESET    0x7777

// timer: mtime counts at TIMEBASE_HZ; writing MTIMECMP (two 32-bit halves,
// low word first) sets the deadline and lowers STIP; STIP is raised when
// mtime >= mtimecmp. Both registers are also readable.
#define CLINT          0x02000000L
#define CLINT_MTIMECMP (CLINT + 0x4000)
#define CLINT_MTIME    (CLINT + 0xBFF8)
#define TIMEBASE_HZ    10000000

// PLIC, with QEMU virt's register offsets; context 1 is hart 0 in S-mode.
#define PLIC           0x0C000000L
#define PLIC_PRIORITY  (PLIC + 0x0)
#define PLIC_PENDING   (PLIC + 0x1000)
#define PLIC_SENABLE   (PLIC + 0x2080)
#define PLIC_SPRIORITY (PLIC + 0x201000)
#define PLIC_SCLAIM    (PLIC + 0x201004)

// devices and their PLIC interrupt numbers
#define UART0          0x10000000L
#define UART0_IRQ      10
#define VIRTIO0        0x10001000L
#define VIRTIO0_IRQ    1
#define VIRTIO1        0x10002000L
#define VIRTIO1_IRQ    2

// RAM starts here; its size comes from struct bootinfo.
#define KERNBASE       0x80000000L
