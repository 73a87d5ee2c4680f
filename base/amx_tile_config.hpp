// The AMX tile configuration (ldtilecfg's 64-byte operand), shared by the AMX kernels. Each kernel
// keeps its configurations as static constants: GCC 12's _tile_loadconfig does not tell the
// compiler that it reads memory, and the stores filling a local one were dropped (a fault).
#pragma once
#include <cstdint>

namespace moerun {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of each tile register
  uint8_t rows[16] = {};
};

}  // namespace moerun
