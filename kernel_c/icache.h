// icache.h: the log of freed user-code pages, read by the harness.
//
// The emulator keeps translations of code per physical page and does not
// notice the kernel's stores into a page it translated as user code, so a
// fence.i must drop them. Dropping all of user memory costs ~0.1 ms; this
// log lets the harness drop only the pages that may have changed since the
// hart's last fence.i: user text is never written in place (exec.c maps it
// R+X), so only a page freed while mapped executable can come back holding
// other code. The harness finds the log by its symbol (codelog) and reads
// CODELOG_SIZE and the layout here (harness/machine/board.py, _on_fence_i).

#define CODELOG_SIZE 256   // a hart that missed more drops all user memory

struct codelog {
  uint64 seq;                   // pages ever logged; bumped after the entry
  uint64 pa[CODELOG_SIZE];      // page number seq % CODELOG_SIZE's address
};
