// sched.c: the deterministic machine's instruction counter, switch points and race
// watch (see sched.h).
#include "sched.h"
#include "unicorn_api.h"

#define UC_HOOK_CODE (1 << 2)
#define UC_HOOK_MEM_READ (1 << 10)
#define UC_HOOK_MEM_WRITE (1 << 11)
#define UC_MEM_WRITE 17

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

// Is the instruction at addr a load, store or AMO not based on sp? (RV64IMAC + F/D
// loads and stores; compressed: quadrant 0's, as quadrant 2's are all sp-based.)
static int
is_access(struct sched_hart *h, void *uc, uint64_t addr, uint32_t size)
{
    uint32_t insn = 0;
    if (size != 2 && size != 4)
        return 0;
    if (((uc_vmem_read_fn)h->vmem_read)(uc, addr, 4 /* UC_PROT_EXEC */, &insn, size))
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

// The first hook of every instruction: count it, or end the run before it.
static void
on_insn(void *uc, uint64_t addr, uint32_t size, void *ud)
{
    struct sched_hart *h = ud;
    struct sched *s = h->s;
    if (s->total >= s->limit || s->count[h->id] >= s->hart_limit[h->id]) {
        s->stopped = SCHED_LIMIT;
        ((uc_emu_stop_fn)h->emu_stop)(uc);
        return;
    }
    if (s->sample_mean && s->total >= s->sample_at) {
        uint64_t priv = 0;
        ((uc_reg_read_fn)h->reg_read)(uc, REG_PRIV, &priv);
        if (s->watch.hi) {
            // one watch at a time: this sample's turn is later
            s->sample_at = s->total + 1 + sched_below(s, 2 * s->sample_mean);
        } else if (priv == 1 && !skipped(s, addr) && is_access(h, uc, addr, size)) {
            // an S-mode access: Python looks at it before it runs
            s->sample_at = s->total + 1 + sched_below(s, 2 * s->sample_mean);
            s->stopped = SCHED_SAMPLE;
            ((uc_emu_stop_fn)h->emu_stop)(uc);
            return;
        }
    }
    s->total++;
    s->count[h->id]++;
}

// A switch point (a later hook than on_insn at the same instruction, so on_insn has
// counted it already unless it stopped there itself).
static void
on_point(void *uc, uint64_t addr, uint32_t size, void *ud)
{
    struct sched_hart *h = ud;
    struct sched *s = h->s;
    (void)addr;
    (void)size;
    if (s->stopped == SCHED_LIMIT || s->stopped == SCHED_SAMPLE)
        return;  // stopped before this instruction already (and did not count it)
    if (s->point_at[h->id] == s->count[h->id] + 1)
        return;  // resumed at the point it decided at (see sched.h)
    s->point_at[h->id] = s->count[h->id] + 1;
    s->points++;
    int go = s->change_at ? s->points >= s->change_at
                          : s->point_permille && sched_below(s, 1000) < s->point_permille;
    if (!go)
        return;
    s->switches++;
    s->total--;  // not run after all: give back on_insn's count
    s->count[h->id]--;
    s->stopped = SCHED_POINT;
    ((uc_emu_stop_fn)h->emu_stop)(uc);
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

int
sched_attach(struct sched_hart *h)
{
    uc_hook_add_fn add = (uc_hook_add_fn)h->hook_add;
    h->npoints = 0;
    h->hook_mem = 0;
    return add(h->uc, &h->hook_insn, UC_HOOK_CODE, (void *)on_insn, h, 1, 0);
}

int
sched_add_point(struct sched_hart *h, uint64_t addr)
{
    uc_hook_add_fn add = (uc_hook_add_fn)h->hook_add;
    if (h->npoints >= sizeof h->hook_points / sizeof h->hook_points[0])
        return -1;
    return add(h->uc, &h->hook_points[h->npoints++], UC_HOOK_CODE, (void *)on_point, h,
               addr, addr);
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
    uc_hook_add_fn add = (uc_hook_add_fn)h->hook_add;
    return add(h->uc, &h->hook_mem, UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, (void *)on_mem, h,
               1, 0);
}

int
sched_detach(struct sched_hart *h)
{
    uc_hook_del_fn del = (uc_hook_del_fn)h->hook_del;
    int err = del(h->uc, h->hook_insn);
    for (uint32_t i = 0; i < h->npoints; i++)
        err |= del(h->uc, h->hook_points[i]);
    h->npoints = 0;
    if (h->hook_mem)
        err |= sched_watch_accesses(h, 0);
    return err;
}
