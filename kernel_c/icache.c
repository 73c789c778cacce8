// icache.c: instruction-fetch coherence between harts.
//
// A hart may hold translations (an instruction cache) of user code that
// has since been replaced: a page that held a program's text is freed and
// reused for another program's text, written by another hart. RISC-V makes
// the hart that will run the new code execute fence.i first. Instead of
// sending every hart an IPI at each exec (SBI's remote_fence_i), the
// kernel defers the fence, as Linux does for an address-space switch
// (flush_icache_deferred): freeing a page that was mapped executable bumps
// codegen, and a hart whose last fence.i predates the bump executes one
// before it runs a process (icache_sync, from the scheduler). User text is
// never writable (exec.c maps it R+X), so the only way stale code can reach
// a hart is through such a freed page; pages that never held code need no
// fence, and a hart that only switches between processes whose code is
// unchanged (pipes, the AI service's workers) never executes one.
//
// The harness implements fence.i by dropping this hart's translations of
// the pages logged in codelog since its last fence.i (icache.h).

#include "types.h"
#include "param.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"
#include "icache.h"

static volatile uint codegen;   // bumped when a page of user code is freed
                                // (a bump repeated by the harness only adds a fence)
struct codelog codelog;         // read by the harness (icache.h)
static struct spinlock codelock = { .name = "codelog" };

// The page at pa, mapped executable in user space, is about to be freed.
// Logged and counted before kfree, so it cannot be refilled with new code
// before a hart that fences can know about it.
void
icache_code_freed(uint64 pa)
{
  acquire(&codelock);
  codelog.pa[codelog.seq % CODELOG_SIZE] = pa;
  codelog.seq++;
  codegen++;
  release(&codelock);
}

// Before this hart runs a process: fence.i if user code may have changed
// since its last one. Interrupts are off.
void
icache_sync(void)
{
  struct cpu *c = mycpu();
  uint g = codegen;

  if(c->codegen != g){
    c->codegen = g;   // read before the fence: a later bump fences again
    fence_i();
  }
}
