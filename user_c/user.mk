# user_c/user.mk: user programs and the file-system image (included by the
# top Makefile, which defines CC, LD, PY and BUILD).
#
#   UPROGS         programs built to build/user/_<name>, installed as /<name>
#   UPROG_ALIASES  extra names for a built program, ALIAS=PROG (/ALIAS is a copy)
#   ULIB           objects every program links with
#   UCFLAGS        compiler flags; UCFLAGS_<name> adds flags for <name>.c only
#   FS_FILES       extra image files, NAME=HOSTPATH (NAME may contain '/')
#   FS_IMG         build/fs.img: all programs plus FS_FILES
#   TESTPROGS      the tests' user programs, tests/kernel_progs/<name>.c, built
#                  with the same flags to build/tests/_<name> (not in the image:
#                  the tests put them in scratch images)
#
# A program made of several files: list it in UPROGS and add its other
# objects as prerequisites, e.g. `$(UBUILD)/_llmrun: $(UBUILD)/llm_math.o`.

U      := user_c
UBUILD := $(BUILD)/user

UPROGS := init sh \
	cat echo grep wc ls mkdir rm ln kill sleep uptime ps halt \
	sysbench usertests \
	ai_daemon llmrun aitest aibench aireadtest chat tok \
	sysfuzz aistress fscrash
UPROG_ALIASES := poweroff=halt llmrun_smol=llmrun llmrun_qwen=llmrun \
	ai_worker=ai_daemon

UCFLAGS := -Wall -Werror -O2 -fno-omit-frame-pointer -ggdb \
	-march=rv64imac_zicsr_zifencei -mabi=lp64 -mcmodel=medany -mno-relax \
	-ffreestanding -fno-common -nostdlib -fno-builtin -fno-stack-protector \
	-fno-pie -no-pie -fno-tree-loop-distribute-patterns \
	-fno-asynchronous-unwind-tables -fno-unwind-tables \
	-I kernel_c -I $(U) -MD
ULDFLAGS := -z max-page-size=4096 -T $(U)/user.ld

ULIB := $(UBUILD)/ulib.o $(UBUILD)/printf.o $(UBUILD)/umalloc.o $(UBUILD)/usys.o
UPROG_BINS := $(UPROGS:%=$(UBUILD)/_%)

FS_IMG   := $(BUILD)/fs.img
FS_FILES += words.txt=$(U)/files/words.txt prompt.txt=$(U)/files/prompt.txt
# 8 MiB: usertests hugefile needs 1.5 MiB free beside the programs (tok, chat,
# llmrun and its two copies carry the guest tokenizer and its Unicode tables)
FS_IMG_ARGS ?= --size-blocks 8192 --ninodes 512

TESTPROGS := ktest aiktest
TBUILD := $(BUILD)/tests
TESTPROG_BINS := $(TESTPROGS:%=$(TBUILD)/_%)

.PHONY: user fsimg
user: $(UPROG_BINS)
fsimg: $(FS_IMG)

$(UBUILD):
	@mkdir -p $@

# the tokenizer's Unicode classes come from Python's unicodedata
$(UBUILD)/uniclass.h: scripts/gen_uniclass.py | $(UBUILD)
	$(PY) scripts/gen_uniclass.py $@
$(UBUILD)/uninorm.h: scripts/gen_uninorm.py | $(UBUILD)
	$(PY) scripts/gen_uninorm.py $@
$(UBUILD)/bpe.o: $(UBUILD)/uniclass.h
$(UBUILD)/nfc.o: $(UBUILD)/uninorm.h
UCFLAGS_bpe := -I $(UBUILD)
UCFLAGS_nfc := -I $(UBUILD)

# the stubs come from the single list of system calls
$(UBUILD)/usys.S: kernel_c/syscall.h scripts/gen_usys.py | $(UBUILD)
	$(PY) scripts/gen_usys.py $< $@

$(UBUILD)/usys.o: $(UBUILD)/usys.S
	$(CC) $(UCFLAGS) -c -o $@ $<

$(UBUILD)/%.o: $(U)/%.c | $(UBUILD)
	$(CC) $(UCFLAGS) $(UCFLAGS_$*) -c -o $@ $<

$(UBUILD)/_%: $(UBUILD)/%.o $(ULIB) $(U)/user.ld
	$(LD) $(ULDFLAGS) -o $@ $(filter %.o,$^)

.PRECIOUS: $(UBUILD)/%.o

$(TBUILD):
	@mkdir -p $@

$(TBUILD)/%.o: tests/kernel_progs/%.c | $(TBUILD)
	$(CC) $(UCFLAGS) -c -o $@ $<

$(TBUILD)/_%: $(TBUILD)/%.o $(ULIB) $(U)/user.ld
	$(LD) $(ULDFLAGS) -o $@ $(filter %.o,$^)

.PRECIOUS: $(TBUILD)/%.o

# harness.disk.mkfs is the kernel's host-side image builder (layout from kernel_c/fs.h)
$(FS_IMG): $(UPROG_BINS) $(foreach f,$(FS_FILES),$(lastword $(subst =, ,$(f)))) \
		$(wildcard harness/disk/fs*.py harness/disk/mkfs.py kernel_c/fs.h)
	$(PY) -m harness.disk.mkfs $(FS_IMG_ARGS) $@ \
	  $(foreach p,$(UPROGS),$(p)=$(UBUILD)/_$(p)) \
	  $(foreach a,$(UPROG_ALIASES),$(firstword $(subst =, ,$(a)))=$(UBUILD)/_$(lastword $(subst =, ,$(a)))) \
	  $(FS_FILES)

-include $(wildcard $(UBUILD)/*.d $(TBUILD)/*.d)

# usertests is split by subject
$(UBUILD)/_usertests: $(UBUILD)/ut_proc.o $(UBUILD)/ut_fs.o $(UBUILD)/ut_mem.o \
	$(UBUILD)/ut_args.o $(UBUILD)/ut_ulib.o
$(UBUILD)/_sh: $(UBUILD)/shparse.o
# the AI programs share ailib.c (ai_submit, ai_wait_status, id parsing)
$(UBUILD)/_init $(UBUILD)/_ai_daemon $(UBUILD)/_llmrun $(UBUILD)/_aitest \
	$(UBUILD)/_aibench $(UBUILD)/_aistress $(UBUILD)/_aireadtest: $(UBUILD)/ailib.o
# the guest tokenizer (bpe.c) and its model glue (tokmodel.c)
$(UBUILD)/_tok $(UBUILD)/_llmrun $(UBUILD)/_chat: $(UBUILD)/bpe.o $(UBUILD)/nfc.o $(UBUILD)/tokmodel.o \
	$(UBUILD)/ailib.o
