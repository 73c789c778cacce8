// console.c: the console device (major CONSOLE in device.h) on the UART.
//
// Reads return one line at a time. Input is edited before any reader sees
// it:
//   backspace, DEL   erase a character
//   ^U               erase the line
//   ^D               end of file (a read of an empty line returns 0)
//   ^P               print the process list
//   ^C               kill every process that has not asked to be spared
//                    (ignintr(); init always is) and drop the line
// Enter may arrive as '\r' (a raw terminal) and is stored as '\n'.

#include <stdarg.h>

#include "types.h"
#include "param.h"
#include "spinlock.h"
#include "sleeplock.h"
#include "fs.h"
#include "file.h"
#include "memlayout.h"
#include "riscv.h"
#include "device.h"
#include "defs.h"
#include "procinfo.h"
#include "proc.h"

#define BACKSPACE 0x100
#define C(x)  ((x) - '@')       // control-x

#define INPUT_BUF 1024

static struct {
  struct spinlock lock;
  char buf[INPUT_BUF];
  uint r;       // read index
  uint w;       // write index: bytes below it are complete lines
  uint e;       // edit index: the line being typed
} cons;

// one write() at a time: the bytes of one call are never interleaved with
// another process's (a process preempted mid-line would otherwise let
// another's output into the middle of its line; Linux's tty layer
// serializes writes the same way)
static struct sleeplock wlock;

// Echo a character; BACKSPACE rubs one out.
void
consputc(int c)
{
  if(c == BACKSPACE){
    uartputc_sync('\b');
    uartputc_sync(' ');
    uartputc_sync('\b');
  } else {
    uartputc_sync(c);
  }
}

// Write n bytes from src (a user address if user_src) to the console,
// whole (see wlock). Returns the number written, or -1 if nothing could be
// copied.
int
consolewrite(int user_src, uint64 src, int n)
{
  char chunk[128];
  int i, m, done = 0;

  acquiresleep(&wlock);
  while(done < n){
    m = n - done;
    if(m > sizeof(chunk))
      m = sizeof(chunk);
    if(either_copyin(chunk, user_src, src + done, m) < 0)
      break;
    for(i = 0; i < m; i++)
      uartputc_sync(chunk[i]);
    done += m;
  }
  releasesleep(&wlock);
  return done > 0 || n == 0 ? done : -1;
}

// Read up to n bytes of one input line into dst (a user address if
// user_dst). Sleeps until a line (or ^D) is complete. Returns the count,
// 0 at end of file, or -1 if the process was killed or dst is bad.
int
consoleread(int user_dst, uint64 dst, int n)
{
  uint target = n;
  int c;
  char cbuf;

  acquire(&cons.lock);
  while(n > 0){
    while(cons.r == cons.w){
      if(killed(myproc())){
        release(&cons.lock);
        return -1;
      }
      sleep(&cons.r, &cons.lock);
    }
    c = cons.buf[cons.r++ % INPUT_BUF];

    if(c == C('D')){
      // end of file; if we already have data, leave ^D for the next read
      // so that it returns 0
      if(n < target)
        cons.r--;
      break;
    }
    cbuf = c;
    if(either_copyout(user_dst, dst, &cbuf, 1) < 0){
      if(n == target){
        cons.r--;
        release(&cons.lock);
        return -1;
      }
      break;
    }
    dst++;
    --n;
    if(c == '\n')
      break;
  }
  release(&cons.lock);
  return target - n;
}

// One byte of input from the UART interrupt: edit, echo, and wake a
// reader when a line is complete.
void
consoleintr(int c)
{
  int intr = 0;

  acquire(&cons.lock);
  switch(c){
  case C('P'):
    procdump();
    break;
  case C('U'):
    while(cons.e != cons.w && cons.buf[(cons.e-1) % INPUT_BUF] != '\n'){
      cons.e--;
      consputc(BACKSPACE);
    }
    break;
  case C('H'):
  case '\x7f':
    if(cons.e != cons.w){
      cons.e--;
      consputc(BACKSPACE);
    }
    break;
  case C('C'):
    cons.e = cons.w;            // drop the partial line
    consputc('^');
    consputc('C');
    consputc('\n');
    intr = 1;
    break;
  default:
    if(c != 0 && cons.e - cons.r < INPUT_BUF){
      c = (c == '\r') ? '\n' : c;
      consputc(c);
      cons.buf[cons.e++ % INPUT_BUF] = c;
      if(c == '\n' || c == C('D') || cons.e - cons.r == INPUT_BUF){
        cons.w = cons.e;
        wakeup(&cons.r);
      }
    }
    break;
  }
  release(&cons.lock);
  if(intr)
    killintr();
}

void
consoleinit(void)
{
  initlock(&cons.lock, "cons");
  initsleeplock(&wlock, "console write");
  uartinit();
  devsw[CONSOLE].read = consoleread;
  devsw[CONSOLE].write = consolewrite;
}
