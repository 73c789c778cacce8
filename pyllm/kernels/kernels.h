// kernels.h: what every pyllm C kernel shares -- the AVX-512 target
// attribute, CPU feature checks and the thread-count setting.
//
// Convention (see build.py): declarations Python may call sit between the
// cffi markers, plain C only.

#ifndef PYLLM_KERNELS_H
#define PYLLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// Functions using AVX-512 intrinsics carry this attribute and are only
// called after pyllm_cpu_has_avx512vnni() said yes, so the module still
// loads and runs (on the generic C path) on any x86-64.
#define PYLLM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

// cffi:begin
int pyllm_cpu_has_avx512vnni(void);
void pyllm_force_generic(int on);
// cffi:end

// The path kernels take: 1 when AVX-512 VNNI is present and not disabled.
int pyllm_use_avx512(void);

#endif
