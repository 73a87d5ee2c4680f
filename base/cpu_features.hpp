// CpuFeatures: what this CPU's instruction set offers the kernels, probed once per process. Every
// kernel choice asks here (one probe, not one per file), so a test or a log line can say which
// kernels a machine runs.
#pragma once

namespace moerun {

struct CpuFeatures {
  bool avx512f = false, avx512bw = false, avx512vnni = false, avx512vbmi = false, avx512bf16 = false;
  bool f16c = false;
  bool amx_bf16 = false;  // AMX-BF16 tiles in the instruction set (CPUID.(7,0):EDX[22])
  bool amx_int8 = false;  // AMX-INT8 usable: tiles and INT8 present, and Linux granted the tile state
  bool amx_bf16_tiles = false;  // AMX-BF16 usable: tiles and BF16 present (with AVX512_BF16), and the tile state granted
};

const CpuFeatures& cpu_features();

}  // namespace moerun
