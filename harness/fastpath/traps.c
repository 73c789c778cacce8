// traps.c: synchronous traps delivered by C hooks (see traps.h; harness/machine/traps.py is the
// specification, and every function here says which of its functions it mirrors).
//
// Unicorn calls UC_HOOK_INTR with the PC already advanced by 4 and nothing written to
// scause/sepc/stval (../shared/reference/unicorn_riscv.md, rows 2a-2b): the hook takes
// the trap into S-mode itself and emulation goes on at stvec in the same emu_start.
// A function returning -1 has changed nothing the Python path would see differently,
// so the hook can hand the same event to Python (fp_py_intr) to decide.

#include <stdbool.h>

#include "hostclock.h"
#include "traps.h"
#include "unicorn_api.h"

#define PRIV_U 0
#define PRIV_S 1
#define PRIV_M 3

#define SSTATUS_SIE (1ull << 1)
#define SSTATUS_SPIE (1ull << 5)
#define SSTATUS_SPP (1ull << 8)
#define SCOUNTEREN_TM (1ull << 1)

#define ECALL 8
#define ILLEGAL 2
#define BREAKPOINT 3

#define EBREAK 0x00100073u
#define C_EBREAK 0x9002u
#define RDTIME_MASK 0xFFFFF07Fu
#define RDTIME 0xC0102073u  // csrrs rd, time, x0

static uint64_t rd(struct fp_hart *h, int reg)
{
    uint64_t v = 0;
    ((uc_reg_read_fn)h->reg_read)(h->uc, reg, &v);
    return v;
}

static void wr(struct fp_hart *h, int reg, uint64_t v)
{
    ((uc_reg_write_fn)h->reg_write)(h->uc, reg, &v);
}

static int is_fetch_fault(uint64_t cause)
{
    return cause == 0 || cause == 1 || cause == 12;
}

static int is_data_fault(uint64_t cause)
{
    return cause == 4 || cause == 5 || cause == 6 || cause == 7 || cause == 13 || cause == 15;
}

// Hart.fetch: the instruction at va (through the MMU, at the current privilege);
// its length, or 0 if it cannot be read.
static int fetch(struct fp_hart *h, uint64_t va, uint32_t *insn)
{
    uint8_t b[2];
    uc_vmem_read_fn vread = (uc_vmem_read_fn)h->vmem_read;
    if (vread(h->uc, va, UC_PROT_EXEC, b, 2))
        return 0;
    uint32_t half = b[0] | (uint32_t)b[1] << 8;
    if ((half & 3) != 3) {
        *insn = half;
        return 2;
    }
    if (vread(h->uc, va + 2, UC_PROT_EXEC, b, 2))
        return 0;
    *insn = half | (uint32_t)(b[0] | (uint32_t)b[1] << 8) << 16;
    return 4;
}

static int64_t sext(uint64_t v, int bits)
{
    v &= (1ull << bits) - 1;
    return (v & (1ull << (bits - 1))) ? (int64_t)v - (1ll << bits) : (int64_t)v;
}

// traps.mem_operand: base register, displacement and access size of a load, store or
// AMO (RV64 I/F/D/A and the C extension's forms); 0 if insn is none of those.
int fp_mem_operand(uint32_t insn, int length, int *base, int64_t *disp, int *size)
{
    if (length == 4) {
        uint32_t op = insn & 0x7F, f3 = (insn >> 12) & 7;
        *base = (insn >> 15) & 31;
        if (op == 0x03 || op == 0x07) {  // LOAD, LOAD-FP
            static const int sizes[8] = {1, 2, 4, 8, 1, 2, 4, 0};
            *disp = sext(insn >> 20, 12);
            *size = sizes[f3];
            return *size != 0;
        }
        if (op == 0x23 || op == 0x27) {  // STORE, STORE-FP
            *disp = sext(((insn >> 25) << 5) | ((insn >> 7) & 31), 12);
            *size = 1 << f3;
            return f3 < 4;
        }
        if (op == 0x2F && (f3 == 2 || f3 == 3)) {  // AMO, LR, SC
            *disp = 0;
            *size = f3 == 2 ? 4 : 8;
            return 1;
        }
        return 0;
    }
    uint32_t quadrant = insn & 3, f3 = (insn >> 13) & 7;
    if (f3 == 0 || f3 == 4)
        return 0;
    if (quadrant == 0) {  // c.fld c.lw c.ld c.fsd c.sw c.sd
        uint32_t hi = ((insn >> 10) & 7) << 3;
        *base = ((insn >> 7) & 7) + 8;
        if (f3 == 2 || f3 == 6) {
            *disp = hi | ((insn >> 4) & 4) | ((insn << 1) & 0x40);
            *size = 4;
        } else {
            *disp = hi | ((insn << 1) & 0xC0);
            *size = 8;
        }
        return 1;
    }
    if (quadrant == 2) {  // the sp-relative forms
        *base = 2;
        if (f3 == 2) {  // c.lwsp
            *disp = ((insn >> 7) & 0x20) | ((insn >> 2) & 0x1C) | ((insn << 4) & 0xC0);
            *size = 4;
        } else if (f3 == 1 || f3 == 3) {  // c.fldsp c.ldsp
            *disp = ((insn >> 7) & 0x20) | ((insn >> 2) & 0x18) | ((insn << 4) & 0x1C0);
            *size = 8;
        } else if (f3 == 6) {  // c.swsp
            *disp = ((insn >> 7) & 0x3C) | ((insn >> 1) & 0xC0);
            *size = 4;
        } else {  // c.fsdsp c.sdsp
            *disp = ((insn >> 7) & 0x38) | ((insn >> 1) & 0x1C0);
            *size = 8;
        }
        return 1;
    }
    return 0;
}

// Traps.effective_address: the address the load/store/AMO at epc accessed (0 if unknown)
static uint64_t effective_address(struct fp_hart *h, uint64_t epc)
{
    uint32_t insn;
    int len = fetch(h, epc, &insn), base, size;
    int64_t disp;
    if (!len || !fp_mem_operand(insn, len, &base, &disp, &size))
        return 0;
    return rd(h, REG_X0 + base) + (uint64_t)disp;
}

// Traps.deliver: take a synchronous trap into S-mode. -1 (with the privilege put back)
// where the Python path raises a MachineFault: no stvec, or a fetch fault on stvec itself.
static int deliver(struct fp_hart *h, uint64_t cause, uint64_t epc, uint64_t tval,
                   uint64_t prev)
{
    if (prev != PRIV_S)
        wr(h, REG_PRIV, PRIV_S);  // S CSRs are accessible from here on
    uint64_t st = rd(h, REG_SSTATUS), stvec = rd(h, REG_STVEC) & ~3ull;
    if (stvec == 0 || (is_fetch_fault(cause) && epc == stvec)) {
        wr(h, REG_PRIV, prev);
        return -1;
    }
    uint64_t st2 = st & ~(SSTATUS_SPP | SSTATUS_SPIE | SSTATUS_SIE);
    if (prev == PRIV_S)
        st2 |= SSTATUS_SPP;
    if (st & SSTATUS_SIE)
        st2 |= SSTATUS_SPIE;
    // one batch, PC last: ends the translated block without uc_reg_write's
    // skip_sync_pc side effect (harness/cpu/registers.py, Hart.set)
    static int regs[5] = {REG_SSTATUS, REG_SCAUSE, REG_SEPC, REG_STVAL, REG_PC};
    uint64_t vals[5] = {st2, cause, epc, tval, stvec};
    void *ptrs[5] = {&vals[0], &vals[1], &vals[2], &vals[3], &vals[4]};
    ((uc_reg_write_batch_fn)h->reg_write_batch)(h->uc, regs, ptrs, 5);
    h->counts[cause < FP_NCAUSE ? cause : FP_NCAUSE - 1]++;
    return 0;
}

// HostClock.mtime
static uint64_t host_mtime(struct fp_hart *h)
{
    return fp_host_mtime(h->t0_ns, h->hz);
}

// Traps._illegal: `csrr rd, time` is emulated, anything else is delivered (cause 2)
static int illegal(struct fp_hart *h, uint64_t epc, uint64_t priv)
{
    uint32_t bits = 0;
    int len = fetch(h, epc, &bits);
    if (len == 4 && (bits & RDTIME_MASK) == RDTIME) {
        int allowed = priv != PRIV_U;
        if (!allowed) {
            wr(h, REG_PRIV, PRIV_M);
            allowed = (rd(h, REG_SCOUNTEREN) & SCOUNTEREN_TM) != 0;
            wr(h, REG_PRIV, priv);
        }
        if (allowed) {
            if (!h->host_clock)
                return -1;  // --clock icount: Python's clock counts the read
            h->rdtime++;
            int rdn = (bits >> 7) & 31;
            if (rdn)
                wr(h, REG_X0 + rdn, host_mtime(h));
            return 0;  // the PC is already past the instruction
        }
    }
    return deliver(h, ILLEGAL, epc, len ? bits : 0, priv);
}

// Traps._on_intr
static int take(struct fp_hart *h, uint32_t intno)
{
    uint64_t epc = rd(h, REG_PC) - 4, priv = rd(h, REG_PRIV);
    if (intno == ECALL) {
        if (priv != PRIV_U)
            return -1;  // ecall from S or M: a MachineFault (no SBI here)
        return deliver(h, ECALL, epc, 0, priv);
    }
    if (intno == ILLEGAL)
        return illegal(h, epc, priv);
    if (is_fetch_fault(intno))
        return deliver(h, intno, epc, epc, priv);
    if (is_data_fault(intno))
        return deliver(h, intno, epc, effective_address(h, epc), priv);
    return -1;  // an exception this machine does not model
}

// Machine._hurry: a trap from U-mode (sstatus.SPP = 0 once delivered) after hurry_ns
// ends the run; the hart holds no kernel lock there
static void hurry(struct fp_hart *h)
{
    struct timespec ts;
    if (rd(h, REG_SSTATUS) & SSTATUS_SPP)
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec < h->hurry_ns)
        return;
    h->hurry_ns = 0;
    h->hurried = 1;
    ((uc_emu_stop_fn)h->emu_stop)(h->uc);
}

static void on_intr(void *uc, uint32_t intno, void *user)
{
    struct fp_hart *h = user;
    if (h->python > 0 || h->watch || take(h, intno) != 0) {
        h->python_traps++;
        fp_py_intr(uc, intno, h->handle);
    } else if (h->hurry_ns > 0) {
        hurry(h);
    }
}

// Traps._on_invalid: ebreak arrives here with the PC on it, not advanced
static bool on_invalid(void *uc, void *user)
{
    struct fp_hart *h = user;
    if (h->python > 0) {
        h->python_traps++;
        return fp_py_invalid(uc, h->handle) != 0;
    }
    uint64_t pc = rd(h, REG_PC);
    uint32_t insn;
    int len = fetch(h, pc, &insn);
    if (!len || (insn != EBREAK && insn != C_EBREAK))
        return false;  // emu_start raises UC_ERR_INSN_INVALID: a machine fault
    if (deliver(h, BREAKPOINT, pc, pc, rd(h, REG_PRIV)) != 0) {
        h->python_traps++;
        return fp_py_invalid(uc, h->handle) != 0;
    }
    h->ebreak_delivered = 1;
    return true;
}

int fp_attach(struct fp_hart *h)
{
    uc_hook_add_fn add = (uc_hook_add_fn)h->hook_add;
    int err = add(h->uc, &h->hook_intr, UC_HOOK_INTR, (void *)on_intr, h, 1, 0);
    if (err)
        return err;
    err = add(h->uc, &h->hook_invalid, UC_HOOK_INSN_INVALID, (void *)on_invalid, h, 1, 0);
    if (err)
        ((uc_hook_del_fn)h->hook_del)(h->uc, h->hook_intr);
    return err;
}

int fp_detach(struct fp_hart *h)
{
    uc_hook_del_fn del = (uc_hook_del_fn)h->hook_del;
    return del(h->uc, h->hook_intr) | del(h->uc, h->hook_invalid);
}
