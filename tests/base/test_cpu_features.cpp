// The one CPU-feature probe against the kernel's own view of this CPU (/proc/cpuinfo's flags).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "base/cpu_features.hpp"

namespace moerun {
namespace {

std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      return flags;
    }
  return {};
}

TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  const std::set<std::string> flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
  EXPECT_EQ(f.avx512vbmi, flags.count("avx512vbmi") == 1);
  EXPECT_EQ(f.avx512bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
  EXPECT_EQ(f.amx_bf16, flags.count("amx_bf16") == 1);
  // Usable AMX-INT8 needs the instructions; the tile state grant is the kernel's to give.
  if (f.amx_int8) EXPECT_TRUE(flags.count("amx_int8") && flags.count("amx_tile"));
  EXPECT_EQ(&cpu_features(), &f);  // probed once
}

}  // namespace
}  // namespace moerun
