// memlayout.h: the physical memory map of our machine.
//
// This file is the single source of truth shared by the kernel and the
// harness (harness/machine/board.py parses the #defines below; never retype them).
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
//   0x00101000 -- hart start/status (SBI HSM style): parked harts start here
//   0x02000000 -- CLINT-style timer: mtime and one S-mode deadline per hart
//   0x02F00000 -- supervisor software interrupts, one register per hart
//                 (RISC-V ACLINT SSWI style): inter-processor interrupts
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

// hart control: hart 0 starts at reset; every other hart is parked until
// the kernel writes a physical start address to HART_START + 4*hart (32
// bits). The hart then enters it in S-mode, paging off, with a0 = hartid
// and a1 = BOOTINFO. HART_STATUS + 4*hart reads 1 once the hart started.
#define HARTCTL        0x00101000L
#define HART_START     (HARTCTL + 0x0)
#define HART_STATUS    (HARTCTL + 0x100)

// timer: mtime counts at TIMEBASE_HZ; writing hart h's MTIMECMP at
// CLINT_MTIMECMP + 8*h (two 32-bit halves, low word first; QEMU virt's
// layout) sets its deadline and lowers its STIP; STIP is raised when
// mtime >= mtimecmp. Both registers are also readable.
#define CLINT          0x02000000L
#define CLINT_MTIMECMP (CLINT + 0x4000)
#define CLINT_MTIMECMP_STRIDE 8
#define CLINT_MTIME    (CLINT + 0xBFF8)
#define TIMEBASE_HZ    10000000

// inter-processor interrupts: writing 1 to SSWI + 4*h raises hart h's
// supervisor software interrupt (SSIP); the target clears it in sip.
// Reads give 0.
#define SSWI           0x02F00000L

// PLIC, with QEMU virt's register offsets: hart h's S-mode context is
// context 2*h+1, so hart h's registers are the ones below plus
// h*PLIC_SENABLE_STRIDE (enables) or h*PLIC_SCONTEXT_STRIDE (threshold,
// claim). There is no M-mode, so contexts 2*h are not wired.
#define PLIC           0x0C000000L
#define PLIC_PRIORITY  (PLIC + 0x0)
#define PLIC_PENDING   (PLIC + 0x1000)
#define PLIC_SENABLE   (PLIC + 0x2080)
#define PLIC_SPRIORITY (PLIC + 0x201000)
#define PLIC_SCLAIM    (PLIC + 0x201004)
#define PLIC_SENABLE_STRIDE  0x100
#define PLIC_SCONTEXT_STRIDE 0x2000

// devices and their PLIC interrupt numbers
#define UART0          0x10000000L
#define UART0_IRQ      10
#define VIRTIO0        0x10001000L
#define VIRTIO0_IRQ    1
#define VIRTIO1        0x10002000L
#define VIRTIO1_IRQ    2

// RAM starts here; its size comes from struct bootinfo.
#define KERNBASE       0x80000000L
