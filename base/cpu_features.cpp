// The one CPU-feature probe.
#include "base/cpu_features.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace moerun {
namespace {

CpuFeatures probe() {
  CpuFeatures f;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.f16c = __builtin_cpu_supports("f16c");
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.amx_bf16 = (d >> 22) & 1;
    const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
    // Linux hands out the tile data state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
    const bool granted = tile && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    f.amx_int8 = granted && int8 && f.avx512f && f.avx512bw;
    f.amx_bf16_tiles = granted && f.amx_bf16 && f.avx512bf16;
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

}  // namespace moerun
