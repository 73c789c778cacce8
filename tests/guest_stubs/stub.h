// stub.h: helpers for the machine-test stubs (bare metal, S-mode, no kernel).
// Addresses come from the kernel's own memlayout.h, like everything else.
#include "types.h"
#include "memlayout.h"

struct frame { uint64 x[32]; };   // x[2] is the interrupted sp

#define csrr(csr) ({ uint64 v_; asm volatile("csrr %0, " #csr : "=r"(v_)); v_; })
#define csrw(csr, v) asm volatile("csrw " #csr ", %0" :: "r"((uint64)(v)))
#define csrs(csr, v) asm volatile("csrs " #csr ", %0" :: "r"((uint64)(v)))
#define csrc(csr, v) asm volatile("csrc " #csr ", %0" :: "r"((uint64)(v)))

#define R8(a) (*(volatile uint8 *)(a))
#define R32(a) (*(volatile uint32 *)(a))
#define R64(a) (*(volatile uint64 *)(a))

#define SIE_SSIE (1 << 1)
#define SIE_STIE (1 << 5)
#define SIE_SEIE (1 << 9)
#define SSTATUS_SIE (1 << 1)
#define SSTATUS_SPP (1 << 8)
#define SSTATUS_SUM (1 << 18)

void putc(int c);
void puts(const char *s);
void puthex(uint64 v);
void putdec(uint64 v);
uint64 rdtime(void);
void power(int kind, int status);
void power_pass(int status);
void trapvec(void);
