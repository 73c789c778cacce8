// unicorn_api.h: the few libunicorn entry points and constants the C traps use.
//
// No Unicorn headers are needed: the C code calls the libunicorn the Python binding has
// already loaded, through function pointers Python hands over (harness/machine/traps_c.py),
// so there is no second copy of the library and nothing to link. Values are Unicorn
// 2.1.4's (unicorn/unicorn_const.py, unicorn/riscv_const.py); the Python side checks the
// register numbers against the binding's at start-up.
#ifndef HARNESS_UNICORN_API_H
#define HARNESS_UNICORN_API_H

#include <stddef.h>
#include <stdint.h>

typedef int (*uc_reg_read_fn)(void *uc, int regid, void *value);
typedef int (*uc_reg_write_fn)(void *uc, int regid, const void *value);
typedef int (*uc_reg_write2_fn)(void *uc, int regid, const void *value, size_t *size);
typedef int (*uc_reg_write_batch_fn)(void *uc, int *regs, void *const *vals, int count);
typedef int (*uc_vmem_read_fn)(void *uc, uint64_t addr, int prot, void *bytes, size_t size);
typedef int (*uc_vmem_translate_fn)(void *uc, uint64_t addr, int prot, uint64_t *paddr);
typedef int (*uc_mem_protect_fn)(void *uc, uint64_t addr, uint64_t size, uint32_t perms);
typedef int (*uc_hook_add_fn)(void *uc, size_t *hh, int type, void *callback,
                              void *user_data, uint64_t begin, uint64_t end, ...);
typedef int (*uc_hook_del_fn)(void *uc, size_t hh);
typedef int (*uc_ctl_fn)(void *uc, int control, ...);
typedef int (*uc_emu_stop_fn)(void *uc);
typedef int (*uc_mmio_map_fn)(void *uc, uint64_t address, size_t size, void *read_cb,
                              void *user_read, void *write_cb, void *user_write);

#define UC_HOOK_INTR 1
#define UC_HOOK_INSN_INVALID (1 << 14)
#define UC_PROT_EXEC 4
// uc_ctl(uc, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), begin, end)
#define UC_CTL_TB_REMOVE_CACHE 9
// uc_ctl(uc, UC_CTL_WRITE(UC_CTL_UC_USE_EXITS, 1), 1): exits come from UC_CTL_UC_EXITS
// (uc_ctl(uc, UC_CTL_WRITE(UC_CTL_UC_EXITS, 2), uint64_t *exits, size_t n)), not `until`
#define UC_CTL_UC_USE_EXITS 4
#define UC_CTL_TB_FLUSH 10
#define UC_CTL_UC_EXITS 6
#define UC_CTL_IO_WRITE 1
#define UC_CTL_WRITE(type, nr) ((type) | ((nr) << 26) | (UC_CTL_IO_WRITE << 30))

// riscv_const.py (harness/machine/traps_c.py checks them against the binding's)
// cffi:begin
#define REG_X0 1
#define REG_SSTATUS 133
#define REG_STVEC 137
#define REG_SCOUNTEREN 138
#define REG_MIP 131
#define REG_SEPC 140
#define REG_SCAUSE 141
#define REG_STVAL 142
#define REG_PC 190
#define REG_PRIV 191
// cffi:end

#endif
