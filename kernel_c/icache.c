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
// The harness makes fence.i cost ~0.1 ms (it drops that hart's
// translations of all user memory), which the old fence on every migration
// paid several times per request on 4 harts.

#include "types.h"
#include "param.h"
#include "riscv.h"
#include "spinlock.h"
#include "procinfo.h"
#include "proc.h"
#include "defs.h"

static volatile uint codegen;   // bumped when a page of user code is freed
                                // (a bump repeated by the harness only adds a fence)

// A page that was mapped executable in user space is being freed.
void
icache_code_freed(void)
{
  __sync_fetch_and_add(&codegen, 1);
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
