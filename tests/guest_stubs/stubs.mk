# tests/guest_stubs/stubs.mk: the bare-metal test programs the machine tests
# boot instead of the kernel (included by the top Makefile, which defines CC
# and BUILD). Each program is start.S + stub.c + <name>.c, linked at RAM's
# base by link.ld, to build/stubs/<name>.elf.

STUBS_SRC := tests/guest_stubs
SBUILD := $(BUILD)/stubs
STUB_PROGS := $(basename $(notdir $(filter-out $(STUBS_SRC)/stub.c, \
	$(wildcard $(STUBS_SRC)/*.c))))
STUB_ELFS := $(STUB_PROGS:%=$(SBUILD)/%.elf)

STUB_CFLAGS := -march=rv64imac_zicsr_zifencei -mabi=lp64 -mcmodel=medany \
	-mno-relax -O2 -g -Wall -Werror -ffreestanding -fno-builtin -nostdlib \
	-nostartfiles -fno-pie -no-pie -fno-omit-frame-pointer -fno-stack-protector \
	-fno-common -I $(STUBS_SRC) -I kernel_c -Wl,--no-warn-rwx-segments

.PHONY: stubs
stubs: $(STUB_ELFS)

$(SBUILD):
	@mkdir -p $@

# one compiler run per program; every header a stub may include is a prerequisite
$(SBUILD)/%.elf: $(STUBS_SRC)/%.c $(STUBS_SRC)/start.S $(STUBS_SRC)/stub.c \
		$(STUBS_SRC)/link.ld $(wildcard $(STUBS_SRC)/*.h kernel_c/*.h) | $(SBUILD)
	$(CC) $(STUB_CFLAGS) -T $(STUBS_SRC)/link.ld -o $@ \
	  $(STUBS_SRC)/start.S $(STUBS_SRC)/stub.c $<
