// kernels.c: run-time CPU feature detection, so one build serves AVX-512 machines
// and older x86-64 alike.

#include "kernels.h"

static int forced_generic;  // tests compare both paths on one machine

// 1 if the CPU has the AVX-512 subsets our fast kernels use.
int
pyllm_cpu_has_avx512vnni(void)
{
  static int cached = -1;
  if (cached < 0) {
    __builtin_cpu_init();
    cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
  }
  return cached;
}

// Make every kernel take its generic C path (on = 1) or the best one (on = 0).
void
pyllm_force_generic(int on)
{
  forced_generic = on;
}

int
pyllm_use_avx512(void)
{
  return !forced_generic && pyllm_cpu_has_avx512vnni();
}
