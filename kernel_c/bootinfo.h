// bootinfo.h: what the firmware (the harness) tells the kernel at reset.
//
// The harness writes one struct bootinfo at physical address BOOTINFO
// (memlayout.h) and enters the kernel in S-mode with a0 = hartid (0) and
// a1 = BOOTINFO (the other harts start later, see HART_START in
// memlayout.h). Shared with harness/abi/bootinfo.py, which reads the layout
// from this file; never retype it. Fields are naturally aligned so C and
// the harness agree without packing pragmas.

#define BOOTINFO_MAGIC    0x4f464e49   // "INFO"
#define BOOTINFO_VERSION  2
#define BOOTINFO_CMD_MAX  3072         // bytes of init's command line, incl. NUL
#define MAXCPU            8            // most harts a machine can have (param.h NCPU)

// flags
#define BOOT_F_ICOUNT     0x1          // mtime follows instruction count
#define BOOT_F_AIDEV      0x2          // the AI device at VIRTIO1 is present
#define BOOT_F_NOLOG      0x8          // no file-system log: writes go straight
                                       // to disk (harness bench fs --no-log)

struct bootinfo {
  uint32 magic;         // BOOTINFO_MAGIC
  uint32 version;       // BOOTINFO_VERSION
  uint64 ram_base;      // == KERNBASE
  uint64 ram_size;      // bytes of RAM; PHYSTOP = ram_base + ram_size
  uint64 timebase_hz;   // mtime ticks per second (== TIMEBASE_HZ)
  uint64 boot_mtime;    // mtime when the harness started the kernel
  uint32 flags;         // BOOT_F_*
  uint32 cmd_len;       // strlen(cmd); 0 = interactive shell
  uint32 ncpu;          // harts on the machine (1..MAXCPU), hart 0 running
  uint32 reserved;      // 0
  char cmd[BOOTINFO_CMD_MAX]; // "harness run -c" commands for init, NUL-terminated
};
