# kernel_c/kernel.mk: build the kernel. Included by the top Makefile, which
# defines CC, LD, OBJDUMP and BUILD.
#
#   build/kernel/kernel.elf   the kernel (loaded by the harness)
#   build/kernel/kernel.asm   disassembly with source
#   build/kernel/kernel.sym   address/name table

KSRC := kernel_c
KBUILD := $(BUILD)/kernel
KERNEL_ELF := $(KBUILD)/kernel.elf

# entry.S must come first: the ELF entry point is its _entry
KERNEL_OBJS := $(addprefix $(KBUILD)/, \
  entry.o \
  main.o \
  printf.o \
  string.o \
  spinlock.o \
  lockorder.o \
  sleeplock.o \
  kalloc.o \
  vm.o \
  icache.o \
  tlb.o \
  proc.o \
  swtch.o \
  trampoline.o \
  kernelvec.o \
  trap.o \
  syscall.o \
  sysproc.o \
  sysfile.o \
  log.o \
  exec.o \
  file.o \
  pipe.o \
  fs.o \
  path.o \
  bio.o \
  virtio_disk.o \
  virtio_ai.o \
  ai_slots.o \
  ai_service.o \
  sysai.o \
  console.o \
  uart.o \
  plic.o \
  timer.o \
  ipi.o \
  power.o)

KCFLAGS := -Wall -Werror -O2 -fno-omit-frame-pointer -ggdb \
  -march=rv64imac_zicsr_zifencei -mabi=lp64 -mcmodel=medany -mno-relax \
  -ffreestanding -fno-common -nostdlib -fno-builtin -fno-stack-protector \
  -fno-pie -no-pie -MD -I$(KSRC)
KLDFLAGS := -z max-page-size=4096 -T $(KSRC)/kernel.ld

$(KERNEL_ELF): $(KERNEL_OBJS) $(KSRC)/kernel.ld
	$(LD) $(KLDFLAGS) -o $@ $(KERNEL_OBJS)
	$(OBJDUMP) -S $@ > $(KBUILD)/kernel.asm
	$(OBJDUMP) -t $@ | sed '1,/SYMBOL TABLE/d; s/ .* / /; /^$$/d' \
	  > $(KBUILD)/kernel.sym

$(KBUILD)/%.o: $(KSRC)/%.c
	@mkdir -p $(KBUILD)
	$(CC) $(KCFLAGS) -c -o $@ $<

$(KBUILD)/%.o: $(KSRC)/%.S
	@mkdir -p $(KBUILD)
	$(CC) $(KCFLAGS) -c -o $@ $<

-include $(KERNEL_OBJS:.o=.d)

.PHONY: kernel
kernel: $(KERNEL_ELF)
