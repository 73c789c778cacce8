// main.c: boot. entry.S calls main() in S-mode with paging off; the first
// process finishes the job in start_init() (it needs to sleep for disk
// I/O, which main() cannot).

#include "types.h"
#include "param.h"
#include "memlayout.h"
#include "vmlayout.h"
#include "bootinfo.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "fs.h"
#include "racy.h"
#include "defs.h"

struct bootinfo bootinfo;       // our copy of what the harness passed
uint64 phystop;                 // end of RAM: ram_base + ram_size

extern char end[];
extern char _entry_hart[];      // entry.S: where the other harts start

// Copy and check struct bootinfo (it lives in a page paging will map
// read-only; a copy keeps the cmd string with the kernel).
static void
loadbootinfo(struct bootinfo *bi)
{
  if(bi->magic != BOOTINFO_MAGIC || bi->version != BOOTINFO_VERSION)
    panic("main: bad bootinfo at 0x%lx (magic %x version %d)", (uint64)bi,
          bi->magic, bi->version);
  memmove(&bootinfo, bi, sizeof(bootinfo));
  bootinfo.cmd[BOOTINFO_CMD_MAX - 1] = 0;
  if(bootinfo.cmd_len >= BOOTINFO_CMD_MAX)
    bootinfo.cmd_len = strlen(bootinfo.cmd);
  if(bootinfo.ram_base != KERNBASE || bootinfo.ram_size < 8*1024*1024 ||
     bootinfo.timebase_hz == 0 || bootinfo.ncpu < 1 || bootinfo.ncpu > NCPU)
    panic("main: unusable bootinfo (ram 0x%lx+0x%lx, timebase %ld, %d harts)",
          bootinfo.ram_base, bootinfo.ram_size, bootinfo.timebase_hz,
          bootinfo.ncpu);
  phystop = bootinfo.ram_base + bootinfo.ram_size;
  // Sv39 as we use it reaches up to MAXVA; keep RAM below the trampoline
  if(phystop > KSTACK(NPROC))
    phystop = KSTACK(NPROC) & ~(MEGAPAGE - 1);
}

static void starthart(void);

void
main(uint64 hartid, struct bootinfo *bi)
{
  w_tp(hartid);
  consoleinit();
  printfinit();
  loadbootinfo(bi);
  printf("\nnexai kernel: rv64imac, Sv39, S-mode, %d hart%s\n", bootinfo.ncpu,
         bootinfo.ncpu > 1 ? "s" : "");

  kinit();              // physical page allocator
  kvminit();            // kernel page table
  kvminithart();        // paging on
  procinit();           // process table
  trapinit();
  trapinithart();       // stvec, interrupt enables
  plicinit();           // interrupt controller
  plicinithart();
  irq_register(UART0_IRQ, uartintr);
  binit();              // buffer cache
  iinit();              // inode table
  fileinit();           // file table
  virtio_disk_init();   // the file system disk
  ai_service_init();    // AI request slots, and the AI device if present
  timerinit();
  userinit();           // the first process
  starthart();          // the other harts
  scheduler();
}

// Start the parked harts one by one, each once the previous one runs its
// scheduler (they share nothing during their init, but the order keeps the
// boot reproducible).
static void
starthart(void)
{
  int i;

  cpus[0].started = 1;
  for(i = 1; i < bootinfo.ncpu; i++){
    *(volatile uint32*)(HART_START + 4*i) = (uint32)(uint64)_entry_hart;
    DATA_RACE_NEXT_LINE("boot handshake: a volatile poll of a flag the started hart sets once, after a fence");
    while(!*(volatile int*)&cpus[i].started)
      cpu_pause();
  }
}

// A secondary hart's main(): the machine is set up; turn on paging, traps,
// its PLIC context and its timer (off), then schedule.
void
mainhart(uint64 hartid)
{
  w_tp(hartid);
  kvminithart();
  trapinithart();
  plicinithart();
  timerinithart();
  __sync_synchronize();
  DATA_RACE_NEXT_LINE("boot handshake: set once, after a fence, polled by hart 0 (main)");
  cpus[hartid].started = 1;
  scheduler();
}

// Print what the kernel found; boot time counts from the harness's reset.
static void
banner(void)
{
  uint64 ms;

  printf("ram   %ld MiB at 0x%lx, kernel %ld KiB, %ld pages free\n",
         bootinfo.ram_size >> 20, bootinfo.ram_base,
         ((uint64)end - KERNBASE) >> 10, kfreepages());
  printf("dev   uart16550 0x%lx irq %d, virtio-blk 0x%lx irq %d (%ld KiB), "
         "timer %ld Hz, plic 0x%lx\n", UART0, UART0_IRQ, VIRTIO0, VIRTIO0_IRQ,
         virtio_disk_blocks() * BSIZE / 1024, bootinfo.timebase_hz, PLIC);
  if(bootinfo.flags & BOOT_F_AIDEV)
    printf("dev   virtio-ai 0x%lx irq %d\n", VIRTIO1, VIRTIO1_IRQ);
  printf("cpu   %d hart%s running\n", bootinfo.ncpu, bootinfo.ncpu > 1 ? "s" : "");
  ms = boottime() * 1000 / bootinfo.timebase_hz;
  printf("boot  %ld ms to /init%s\n", ms,
         bootinfo.flags & BOOT_F_ICOUNT ? " (instruction-count clock)" : "");
}

// Run in the first process: mount the file system and exec /init, with
// argv {"init", "-c", cmd} when the harness passed commands.
void
start_init(void)
{
  struct proc *p = myproc();
  char *argv[4];
  int argc;

  // a disk we cannot use is refused, not a panic: power off with status 1
  // after fsinit's message
  if(fsinit(ROOTDEV) < 0)
    poweroff(POWER_PASS, 1);
  p->cwd = namei("/");
  banner();

  argv[0] = "init";
  if(bootinfo.cmd_len > 0){
    argv[1] = "-c";
    argv[2] = bootinfo.cmd;
    argv[3] = 0;
  } else {
    argv[1] = 0;
  }
  if((argc = kexec("/init", argv)) < 0){
    printf("start_init: cannot exec /init: the disk has no usable /init\n");
    poweroff(POWER_PASS, 1);
  }
  p->trapframe->a0 = argc;
}
