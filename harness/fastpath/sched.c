// sched.c: the deterministic machine's instruction counter, switch points and race
// watch (see sched.h).
#include <stdbool.h>
#include <string.h>

#include "sched.h"
#include "unicorn_api.h"

#define UC_HOOK_CODE (1 << 2)
#define UC_HOOK_BLOCK (1 << 3)
#define UC_HOOK_MEM_READ_PROT (1 << 7)
#define UC_HOOK_MEM_WRITE_PROT (1 << 8)
#define UC_HOOK_MEM_READ (1 << 10)
#define UC_HOOK_MEM_WRITE (1 << 11)
#define UC_MEM_WRITE 17
#define UC_PROT_NONE 0
#define PRIV_U 0
#define PAGE 0x1000ull
#define WFI 0x10500073u
// exits set in one run before the counter gives up (normally one: the slice's end; a
// trap in the block before it, or an interrupt taken when the block is left, drops it
// and the block after sets it again)
#define SCHED_MAXARMS 64

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
sched_next(struct sched *s)
{
    uint64_t *r = s->rng;
    uint64_t out = rotl(r[1] * 5, 7) * 9;
    uint64_t t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

// A number in [0, n), n > 0 (Lemire's multiply-shift; the bias is below 2^-32 for the
// small n used here, and it is the same on every run, which is what matters).
uint64_t
sched_below(struct sched *s, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)sched_next(s) * n) >> 64);
}

// splitmix64 expands one seed into the four state words (never all zero)
void
sched_seed(struct sched *s, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        s->rng[i] = z ^ (z >> 31);
    }
}

static uint64_t
reg(struct sched_hart *h, void *uc, int regid)
{
    uint64_t v = 0;
    ((uc_reg_read_fn)h->reg_read)(uc, regid, &v);
    return v;
}

// ---------------------------------------------------------------- decoding
// An instruction's length is in its first byte's two low bits (RVC: 11 = 32-bit), so
// only first bytes are read.

// Instructions in size bytes of code.
uint32_t
sched_insns(const uint8_t *code, uint32_t size)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < size; n++)
        i += (code[i] & 3) == 3 ? 4 : 2;
    return n;
}

// Bytes of the first k instructions.
static uint32_t
offset_of(const uint8_t *code, uint32_t k)
{
    uint32_t off = 0;
    while (k--)
        off += (code[off] & 3) == 3 ? 4 : 2;
    return off;
}

// Instructions that start before byte `off`.
static uint32_t
index_of(const uint8_t *code, uint64_t off)
{
    uint32_t n = 0;
    for (uint64_t i = 0; i < off; n++)
        i += (code[i] & 3) == 3 ? 4 : 2;
    return n;
}

// ---------------------------------------------------------------- where a block's code is
// The privilege as Unicorn has it now; a new U-mode stretch forgets the user pages
// (a page table can only change while S-mode code runs).
static void
look_at_mode(struct sched_hart *h, void *uc)
{
    int user = reg(h, uc, REG_PRIV) == PRIV_U;
    if (user && !h->user)
        h->tlb_gen++;
    h->user = user;
    h->mode_unknown = 0;
}

// The kernel code range holding [va, va+size), its bytes in host memory; or NULL.
static const uint8_t *
kernel_code(const struct sched_code *c, uint64_t va, uint32_t size)
{
    for (uint32_t i = 0; i < c->nfixed; i++)
        if (va >= c->fixed_lo[i] && va - c->fixed_lo[i] + size <= c->fixed_hi[i] - c->fixed_lo[i])
            return c->fixed_host[i] + (va - c->fixed_lo[i]);
    return NULL;
}

// Host address of the page of code at va as this hart sees it now (through the MMU,
// remembered for the U-mode stretch), or NULL if it is not in RAM.
static const uint8_t *
code_page(struct sched_hart *h, void *uc, uint64_t va)
{
    const struct sched_code *c = h->code;
    uint64_t page = va / PAGE;
    uint32_t k = (uint32_t)page & (SCHED_TLB - 1);
    if (h->user && h->tlb_tag[k] == h->tlb_gen && h->tlb_page[k] == page)
        return h->tlb_host[k];
    uint64_t pa = 0;
    uint8_t *host = NULL;
    if (!((uc_vmem_translate_fn)h->vmem_translate)(uc, page * PAGE, UC_PROT_EXEC, &pa)
        && pa >= c->ram_base && pa - c->ram_base < c->ram_size)
        host = c->ram + (pa - c->ram_base);
    if (h->user) {
        h->tlb_page[k] = page;
        h->tlb_tag[k] = h->tlb_gen;
        h->tlb_host[k] = host;
    }
    return host;
}

// The bytes of the block [va, va+size) and its instruction count (*n); NULL if they
// cannot be read (the count is then unknown).
static const uint8_t *
block_code(struct sched_hart *h, void *uc, uint64_t va, uint32_t size, uint32_t *n)
{
    struct sched_code *c = (struct sched_code *)h->code;  // its cache is filled here
    if (h->mode_unknown)
        look_at_mode(h, uc);
    const uint8_t *code = c->ram ? kernel_code(c, va, size) : NULL;
    if (code && h->user)
        look_at_mode(h, uc);  // U-mode at a kernel address: an interrupt, or user code there
    if (code && !h->user && c->slots && va - c->fixed_lo[0] < c->fixed_hi[0] - c->fixed_lo[0]) {
        uint32_t *e = &c->slots[(va - c->fixed_lo[0]) / 2];
        if ((*e & 0xFFFF) != size) {
            *e = size | sched_insns(code, size) << 16;
            c->misses++;
        }
        *n = *e >> 16;
        return code;
    }
    if (code && !h->user) {
        struct sched_block *b = &c->cache[(va >> 1) & (SCHED_CACHE - 1)];
        if (b->va != (uint32_t)va || b->size != size) {
            b->va = (uint32_t)va;
            b->size = (uint16_t)size;
            b->n = (uint16_t)sched_insns(code, size);
            c->misses++;
        }
        *n = b->n;
        return code;
    }
    if (!h->user)
        look_at_mode(h, uc);  // S-mode outside the kernel's code: has it left S-mode?
    code = NULL;
    if (c->ram && va % PAGE + size <= PAGE) {
        code = code_page(h, uc, va);
        if (code)
            code += va % PAGE;
    }
    if (!code) {  // across two pages, or not in RAM: a copy
        if (size > SCHED_XBUF
            || ((uc_vmem_read_fn)h->vmem_read)(uc, va, UC_PROT_EXEC, h->xbuf, size))
            return NULL;
        code = h->xbuf;
    }
    *n = sched_insns(code, size);
    return code;
}

// ---------------------------------------------------------------- counting
// n instructions of the current block ran; it is left.
static void
credit(struct sched_hart *h, uint32_t n)
{
    h->left -= n;
    h->cur_n = 0;
}

// Instructions of the blocks this run has finished (not in `s` yet).
static inline uint64_t
ran(const struct sched_hart *h)
{
    return h->budget - h->left;
}

// Instructions of the current block up to and including the one at pc (the one a hook
// or a device callback is called for: it has started), all of them if pc is outside.
static uint32_t
done_at(const struct sched_hart *h, uint64_t pc)
{
    if (pc >= h->cur_va && pc < h->cur_va + h->cur_size)
        return index_of(h->cur_code, pc - h->cur_va) + 1;
    return h->cur_n;
}

// Instructions the hart may still execute before a limit.
static uint64_t
room(const struct sched *s, uint32_t id)
{
    uint64_t a = s->limit > s->total ? s->limit - s->total : 0;
    uint64_t b = s->hart_limit[id] > s->count[id] ? s->hart_limit[id] - s->count[id] : 0;
    return a < b ? a : b;
}

static int
ctl(struct sched_hart *h, void *uc, int control, uint64_t a, uint64_t b)
{
    return ((uc_ctl_fn)h->ctl)(uc, control, a, b);
}

// The run ends at `at`, inside the block at va: an exit there, the translations holding
// `at` dropped, and the PC written back to va (Unicorn leaves the TB at once and goes on
// at va with a new translation, which ends at the exit).
static void
arm_exit(struct sched_hart *h, void *uc, uint64_t va, uint64_t at)
{
    uint64_t exits[1] = {at};
    ((uc_ctl_fn)h->ctl)(uc, UC_CTL_WRITE(UC_CTL_UC_EXITS, 2), exits, (size_t)1);
    ctl(h, uc, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), at, at + 1);
    h->exit_armed = 1;
    h->exit_va = at;
    h->exit_block = va;
    ((struct sched_code *)h->code)->exits++;
    ((uc_reg_write_fn)h->reg_write)(uc, REG_PC, &va);
}

// No exit any more. `drop`: also the translation that ends at it (Unicorn drops it
// itself when a run ends with the exit set).
static void
disarm_exit(struct sched_hart *h, void *uc, int drop)
{
    uint64_t none[1] = {0};
    ((uc_ctl_fn)h->ctl)(uc, UC_CTL_WRITE(UC_CTL_UC_EXITS, 2), none, (size_t)0);
    if (drop)
        ctl(h, uc, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), h->exit_va - 1, h->exit_va);
    h->exit_armed = 0;
}

static void
stop(struct sched_hart *h, void *uc, uint32_t why)
{
    h->s->stopped = why;
    ((uc_emu_stop_fn)h->emu_stop)(uc);
}

// on_block's other cases: U-mode, the privilege to look at, an exit set, a block not
// in the cache, a limit in the block.
static void __attribute__((noinline))
block_slow(struct sched_hart *h, void *uc, uint64_t va, uint32_t size)
{
    if (h->exit_armed && (va != h->exit_block || va + size != h->exit_va))
        disarm_exit(h, uc, 1);  // not the block the exit was set for (an interrupt came first)
    uint32_t n = 0;
    const uint8_t *code = block_code(h, uc, va, size, &n);
    h->cur_code = code;
    if (code && n <= h->left) {
        h->cur_n = n;
        return;
    }
    if (h->left == 0) {
        stop(h, uc, SCHED_LIMIT);  // before the block's first instruction
        return;
    }
    if (!code || ++h->arms > SCHED_MAXARMS) {
        h->error = 1;
        stop(h, uc, SCHED_RAN);
        return;
    }
    arm_exit(h, uc, va, va + offset_of(code, (uint32_t)h->left));
}

// on_block's U-mode case: a page of user code seen in this stretch (not kernel code: a
// U-mode hart there may have taken an interrupt), else block_slow.
static void __attribute__((noinline))
block_user(struct sched_hart *h, void *uc, uint64_t va, uint32_t size)
{
    uint64_t page = va / PAGE;
    uint32_t k = (uint32_t)page & (SCHED_TLB - 1);
    if (va % PAGE + size <= PAGE && h->tlb_tag[k] == h->tlb_gen && h->tlb_page[k] == page
        && h->tlb_host[k] && !kernel_code(h->code, va, size)) {
        const uint8_t *code = h->tlb_host[k] + va % PAGE;
        uint32_t n = sched_insns(code, size);
        if (n <= h->left) {
            h->cur_code = code;
            h->cur_n = n;
            return;
        }
    }
    block_slow(h, uc, va, size);
}

// The start of every translated block: the block before it ran to its end. The common
// case, an S-mode block of the kernel's text already decoded, takes no call.
static void
on_block(void *uc, uint64_t va, uint32_t size, void *ud)
{
    struct sched_hart *h = ud;
    h->left -= h->cur_n;
    h->cur_va = va;
    h->cur_size = size;
    uint64_t off = va - h->text_lo, len = h->text_len;
    if (!(h->user | h->mode_unknown | h->exit_armed) && off < len && size <= len - off) {
        uint32_t e = h->slots[off / 2];
        if ((e & 0xFFFF) == size && e >> 16 <= h->left) {
            h->cur_code = h->text + off;
            h->cur_n = e >> 16;
            return;
        }
    }
    h->cur_n = 0;
    if (h->user && !(h->mode_unknown | h->exit_armed))
        block_user(h, uc, va, size);
    else
        block_slow(h, uc, va, size);
}

// A synchronous exception (first of the UC_HOOK_INTR hooks): the instructions of the
// block up to the faulting one count (Unicorn has advanced the PC by 4, whatever the
// instruction's length); an instruction fetch fault lies outside the block, which then
// ran to its end.
static void
on_intr(void *uc, uint32_t intno, void *ud)
{
    struct sched_hart *h = ud;
    (void)intno;
    h->mode_unknown = 1;
    if (h->exit_armed)
        disarm_exit(h, uc, 1);
    if (h->cur_n)
        credit(h, done_at(h, reg(h, uc, REG_PC) - 4));
}

// ebreak (first of the UC_HOOK_INSN_INVALID hooks; the PC is still on it): counted as
// above, and left to the trap hooks.
static bool
on_invalid(void *uc, void *ud)
{
    struct sched_hart *h = ud;
    h->mode_unknown = 1;
    if (h->exit_armed)
        disarm_exit(h, uc, 1);
    if (h->cur_n)
        credit(h, done_at(h, reg(h, uc, REG_PC)));
    return false;
}

// An sret is about to run: the privilege after it is looked at in the next block.
static void
on_sret(void *uc, uint64_t addr, uint32_t size, void *ud)
{
    struct sched_hart *h = ud;
    (void)uc;
    (void)addr;
    (void)size;
    h->mode_unknown = 1;
}

// An access to a device window (their pages have no permissions: see sched.h). Unicorn
// has written the PC of the accessing instruction before calling this.
static bool
on_mmio(void *uc, int type, uint64_t addr, int size, int64_t value, void *ud)
{
    const struct sched_code *c = ((struct sched_hart *)ud)->code;
    (void)uc;
    (void)type;
    (void)size;
    (void)value;
    for (uint32_t i = 0; i < c->nwin; i++)
        if (addr >= c->win_lo[i] && addr < c->win_hi[i])
            return true;
    return false;  // not a device: the access fails as it would without this hook
}

// Does the instruction before byte `off` of the block end at `off` and is it wfi? (wfi
// does not end its block: Unicorn returns from the run with the PC past it, in the block.)
static int
after_wfi(const uint8_t *code, uint64_t off)
{
    uint64_t i = 0, last = 0;
    while (i < off) {
        last = i;
        i += (code[i] & 3) == 3 ? 4 : 2;
    }
    uint32_t insn;
    if (i != off || off - last != 4)
        return 0;
    memcpy(&insn, code + last, 4);
    return insn == WFI;
}

uint64_t
sched_total_now(struct sched_hart *h)
{
    uint64_t n = h->s->total + ran(h);
    if (h->cur_n)
        n += done_at(h, reg(h, h->uc, REG_PC));
    return n;
}

uint64_t
sched_count_now(struct sched_hart *h)
{
    uint64_t n = h->s->count[h->id] + ran(h);
    if (h->cur_n)
        n += done_at(h, reg(h, h->uc, REG_PC));
    return n;
}

void
sched_begin(struct sched_hart *h)
{
    h->left = h->budget = room(h->s, h->id);
    if (h->hook_insn && !h->sampling) {  // no sampling: no hook at every instruction
        ((uc_hook_del_fn)h->hook_del)(h->uc, h->hook_insn);
        h->hook_insn = 0;
        ((uc_ctl_fn)h->ctl)(h->uc, UC_CTL_WRITE(UC_CTL_TB_FLUSH, 0));
    }
    h->cur_n = 0;
    h->arms = 0;
    h->error = 0;
    h->mode_unknown = 1;
    h->tlb_gen++;
}

// After the run: the instructions of the block it ended in, up to the PC (the one at the
// PC too, unless the counter's own stop was before it); 1 if the count is unreliable.
int
sched_end(struct sched_hart *h)
{
    struct sched *s = h->s;
    void *uc = h->uc;
    uint64_t pc = reg(h, uc, REG_PC);
    int ours = s->stopped == SCHED_LIMIT || s->stopped == SCHED_POINT
               || s->stopped == SCHED_SAMPLE;
    if (h->exit_armed) {
        if (h->cur_n && pc == h->exit_va && h->cur_va + h->cur_size == pc)
            s->stopped = SCHED_LIMIT;  // the run reached its exit
        disarm_exit(h, uc, 0);
    }
    if (h->cur_n) {
        uint32_t n = h->cur_n;
        if (pc >= h->cur_va && pc < h->cur_va + h->cur_size) {
            n = index_of(h->cur_code, pc - h->cur_va);
            if (!ours && !after_wfi(h->cur_code, pc - h->cur_va))
                n++;
        }
        credit(h, n);
    }
    s->total += ran(h);
    s->count[h->id] += ran(h);
    h->left = h->budget = 0;
    return h->error;
}

// ---------------------------------------------------------------- switch points
// Is the instruction at addr a load, store or AMO not based on sp? (RV64IMAC + F/D
// loads and stores; compressed: quadrant 0's, as quadrant 2's are all sp-based.)
static int
is_access(struct sched_hart *h, void *uc, uint64_t addr, uint32_t size)
{
    uint32_t insn = 0;
    if (size != 2 && size != 4)
        return 0;
    if (((uc_vmem_read_fn)h->vmem_read)(uc, addr, UC_PROT_EXEC, &insn, size))
        return 0;
    if (size == 2) {
        uint32_t f3 = (insn >> 13) & 7;
        return (insn & 3) == 0 && f3 != 0 && f3 != 4;
    }
    uint32_t op = insn & 0x7F, rs1 = (insn >> 15) & 31;
    return (op == 0x03 || op == 0x07 || op == 0x23 || op == 0x27 || op == 0x2F) && rs1 != 2;
}

static int
skipped(const struct sched *s, uint64_t addr)
{
    for (uint32_t i = 0; i < s->nskip; i++)
        if (addr >= s->skip_lo[i] && addr < s->skip_hi[i])
            return 1;
    return 0;
}

// Instructions of the current block before the one at addr (a code hook's).
static uint32_t
before(const struct sched_hart *h, uint64_t addr)
{
    if (!h->cur_n || addr < h->cur_va || addr >= h->cur_va + h->cur_size)
        return 0;
    return index_of(h->cur_code, addr - h->cur_va);
}

// Race sampling (a UC_HOOK_CODE over all addresses, only while sampling is on): end the
// run before an S-mode access once the count has passed sample_at.
static void
on_insn(void *uc, uint64_t addr, uint32_t size, void *ud)
{
    struct sched_hart *h = ud;
    struct sched *s = h->s;
    if (!h->sampling || !s->sample_mean)
        return;
    // the instructions of a block come in order: no decoding for the index
    uint32_t idx = addr == h->cur_va ? 0 : addr == h->next_va ? h->next_idx : before(h, addr);
    h->next_va = addr + size;
    h->next_idx = idx + 1;
    uint64_t total = s->total + ran(h) + idx;  // executed before this one
    if (total < s->sample_at)
        return;
    uint64_t priv = reg(h, uc, REG_PRIV);
    if (s->watch.hi) {
        // one watch at a time: this sample's turn is later
        s->sample_at = total + 1 + sched_below(s, 2 * s->sample_mean);
    } else if (priv == 1 && !skipped(s, addr) && is_access(h, uc, addr, size)) {
        // an S-mode access: Python looks at it before it runs
        s->sample_at = total + 1 + sched_below(s, 2 * s->sample_mean);
        stop(h, uc, SCHED_SAMPLE);
    }
}

// A switch point (a code hook on its address). The run ends before the instruction when
// the schedule switches here; point_at is the hart's count including this instruction,
// plus one.
static void
on_point(void *uc, uint64_t addr, uint32_t size, void *ud)
{
    struct sched_hart *h = ud;
    struct sched *s = h->s;
    (void)size;
    if (s->stopped == SCHED_LIMIT || s->stopped == SCHED_SAMPLE)
        return;  // stopped before this instruction already
    uint64_t count = s->count[h->id] + ran(h) + before(h, addr) + 1;
    if (s->point_at[h->id] == count + 1)
        return;  // resumed at the point it decided at (see sched.h)
    s->point_at[h->id] = count + 1;
    s->points++;
    int go = s->change_at ? s->points >= s->change_at
                          : s->point_permille && sched_below(s, 1000) < s->point_permille;
    if (!go)
        return;
    s->switches++;
    stop(h, uc, SCHED_POINT);
}

static void
on_mem(void *uc, int type, uint64_t addr, int size, int64_t value, void *ud)
{
    struct sched_hart *h = ud;
    struct sched_watch *w = &h->s->watch;
    (void)uc;
    (void)value;
    if (!w->hi || addr >= w->hi || addr + (uint64_t)size <= w->lo || h->id == w->hart)
        return;
    w->hits++;
    fp_py_watch(h->handle, addr, size, type == UC_MEM_WRITE);
}

// ---------------------------------------------------------------- hooks
static int
add(struct sched_hart *h, size_t *hh, int type, void *fn, uint64_t lo, uint64_t hi)
{
    return ((uc_hook_add_fn)h->hook_add)(h->uc, hh, type, fn, h, lo, hi);
}

// The hart's counting hooks: before its other hooks, so that ours see a trap first. The
// race sampling hook is added too, first among the code hooks as a sample must come
// before a switch point's draw and a spin loop's yield at the same instruction; a hart
// whose first run finds sampling off drops it (sched_begin) before anything is translated.
int
sched_attach(struct sched_hart *h)
{
    h->npoints = h->nsret = 0;
    h->hook_mem = h->hook_insn = h->hook_mmio = 0;
    h->sampling = 0;
    h->cur_n = 0;
    h->exit_armed = 0;
    h->tlb_gen = 1;
    int err = ((uc_ctl_fn)h->ctl)(h->uc, UC_CTL_WRITE(UC_CTL_UC_USE_EXITS, 1), 1);
    err = err ? err : add(h, &h->hook_block, UC_HOOK_BLOCK, (void *)on_block, 1, 0);
    err = err ? err : add(h, &h->hook_intr, UC_HOOK_INTR, (void *)on_intr, 1, 0);
    err = err ? err : add(h, &h->hook_invalid, UC_HOOK_INSN_INVALID, (void *)on_invalid, 1, 0);
    return err ? err : add(h, &h->hook_insn, UC_HOOK_CODE, (void *)on_insn, 1, 0);
}

int
sched_add_point(struct sched_hart *h, uint64_t addr)
{
    if (h->npoints >= SCHED_MAXPOINTS)
        return -1;
    return add(h, &h->hook_points[h->npoints++], UC_HOOK_CODE, (void *)on_point, addr, addr);
}

int
sched_add_sret(struct sched_hart *h, uint64_t addr)
{
    if (h->nsret >= SCHED_MAXSRET)
        return -1;
    return add(h, &h->hook_sret[h->nsret++], UC_HOOK_CODE, (void *)on_sret, addr, addr);
}

// h's copy of the kernel text's place (h->code's first range), for on_block.
void
sched_layout(struct sched_hart *h)
{
    const struct sched_code *c = h->code;
    int ok = c->nfixed && c->slots;
    h->text_lo = ok ? c->fixed_lo[0] : 0;
    h->text_len = ok ? c->fixed_hi[0] - c->fixed_lo[0] : 0;
    h->text = ok ? c->fixed_host[0] : NULL;
    h->slots = ok ? c->slots : NULL;
}

// The device windows of h->code: no permissions, and on_mmio to let each access through.
int
sched_guard_mmio(struct sched_hart *h)
{
    const struct sched_code *c = h->code;
    if (!c->nwin || h->hook_mmio)
        return 0;
    uint64_t lo = c->win_lo[0], hi = c->win_hi[0];
    for (uint32_t i = 0; i < c->nwin; i++) {
        int err = ((uc_mem_protect_fn)h->mem_protect)(h->uc, c->win_lo[i],
                                                       c->win_hi[i] - c->win_lo[i], UC_PROT_NONE);
        if (err)
            return err;
        lo = c->win_lo[i] < lo ? c->win_lo[i] : lo;
        hi = c->win_hi[i] > hi ? c->win_hi[i] : hi;
    }
    return add(h, &h->hook_mmio, UC_HOOK_MEM_READ_PROT | UC_HOOK_MEM_WRITE_PROT,
               (void *)on_mmio, lo, hi - 1);
}

// Race sampling on or off. Turned on after the hook was dropped, it comes after the other
// code hooks (a sample then follows their stops at the same instruction).
int
sched_sampling(struct sched_hart *h, int on)
{
    h->sampling = on;
    if (!on || h->hook_insn)
        return 0;
    int err = add(h, &h->hook_insn, UC_HOOK_CODE, (void *)on_insn, 1, 0);
    ((uc_ctl_fn)h->ctl)(h->uc, UC_CTL_WRITE(UC_CTL_TB_FLUSH, 0));  // compiled in from now
    return err;
}

int
sched_watch_accesses(struct sched_hart *h, int on)
{
    if (on == (h->hook_mem != 0))
        return 0;
    if (!on) {
        int err = ((uc_hook_del_fn)h->hook_del)(h->uc, h->hook_mem);
        h->hook_mem = 0;
        return err;
    }
    return add(h, &h->hook_mem, UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, (void *)on_mem, 1, 0);
}

int
sched_detach(struct sched_hart *h)
{
    uc_hook_del_fn del = (uc_hook_del_fn)h->hook_del;
    int err = del(h->uc, h->hook_block) | del(h->uc, h->hook_intr) | del(h->uc, h->hook_invalid);
    for (uint32_t i = 0; i < h->npoints; i++)
        err |= del(h->uc, h->hook_points[i]);
    for (uint32_t i = 0; i < h->nsret; i++)
        err |= del(h->uc, h->hook_sret[i]);
    h->npoints = h->nsret = 0;
    if (h->hook_mmio)
        err |= del(h->uc, h->hook_mmio);
    h->hook_mmio = 0;
    if (h->hook_insn)
        err |= del(h->uc, h->hook_insn);
    h->hook_insn = 0;
    h->sampling = 0;
    err |= sched_watch_accesses(h, 0);
    return err;
}
