// base/weight_scheme_table: one row per scheme, one spelling each, and the sizes the row states
// are the bytes quant_format actually stores.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/native_matmul.hpp"
#include "base/quant_format.hpp"
#include "base/quant_matmul.hpp"
#include "base/weight_scheme_table.hpp"

namespace moerun {
namespace {

const WeightScheme kAll[] = {WeightScheme::Plain, WeightScheme::Q8,    WeightScheme::Q4,
                             WeightScheme::Int4,  WeightScheme::Mxfp4, WeightScheme::Fp8Block};

TEST(WeightSchemeTable, EverySchemeHasOneRowAndOneName) {
  std::set<std::string> names;
  for (WeightScheme s : kAll) {
    const WeightSchemeRow& r = weight_scheme_row(s);
    EXPECT_EQ(r.scheme, s);
    if (s == WeightScheme::Plain) continue;
    EXPECT_TRUE(names.insert(r.name).second) << r.name << " spelt twice";
    EXPECT_EQ(weight_scheme_by_name(r.name), s);
  }
  EXPECT_EQ(weight_scheme_table().size(), std::size(kAll));
  EXPECT_FALSE(weight_scheme_by_name("fp8").has_value()) << "one spelling: fp8-block";
  EXPECT_FALSE(weight_scheme_by_name("").has_value()) << "Plain is named by its dtype";
}

TEST(WeightSchemeTable, GroupBitsAreTheStoredBytes) {
  const int64_t cols = 4096;
  for (WeightScheme s : kAll) {
    const WeightSchemeRow& r = weight_scheme_row(s);
    EXPECT_EQ(is_group_quantized(s), r.kernels == WeightKernels::Group);
    EXPECT_EQ(is_native_quantized(s), r.kernels == WeightKernels::Native);
    if (r.kernels != WeightKernels::Group) continue;
    const int64_t levels = s == WeightScheme::Int4 ? cols / kQuantGroup : 0;  // one byte per group
    const int64_t bytes = quant_row_bytes(s, cols) + 2 * quant_row_scales(s, cols) + levels;
    EXPECT_DOUBLE_EQ(8.0 * static_cast<double>(bytes) / cols, r.bits_per_weight) << r.name;
    EXPECT_EQ(r.block_cols, kQuantGroup) << r.name;
  }
}

// The group kernels are found from the table's rows: every Group row has its kernels (a blocked
// matrix of zeros has no bad scale), and no other row reaches them.
TEST(WeightSchemeTable, GroupRowsReachTheirKernels) {
  const std::vector<uint8_t> zeros(1 << 16, 0);
  for (const WeightSchemeRow& r : weight_scheme_table()) {
    if (r.kernels == WeightKernels::Group)
      EXPECT_EQ(quant_blocked_find_bad(r.scheme, 16, 64, zeros.data()), -1) << r.name;
    else
      EXPECT_THROW(quant_blocked_find_bad(r.scheme, 16, 64, zeros.data()), Error) << static_cast<int>(r.scheme);
  }
}

TEST(WeightSchemeTable, VersionsAndChoices) {
  EXPECT_EQ(weight_scheme_row(WeightScheme::Plain).format_version, 3);
  EXPECT_EQ(weight_scheme_row(WeightScheme::Q8).format_version, 4);
  EXPECT_EQ(weight_scheme_row(WeightScheme::Q4).format_version, 4);
  EXPECT_EQ(weight_scheme_row(WeightScheme::Mxfp4).format_version, 5);
  EXPECT_EQ(weight_scheme_row(WeightScheme::Fp8Block).format_version, 5);
  EXPECT_EQ(weight_scheme_row(WeightScheme::Int4).format_version, 9);
  EXPECT_EQ(weight_scheme_names([](const WeightSchemeRow& r) { return r.dense_quantizable; }), "q8 or q4");
  EXPECT_EQ(weight_scheme_names([](const WeightSchemeRow& r) { return r.convert_quantizable; }), "q8, q4 or int4");
  EXPECT_EQ(weight_scheme_names([](const WeightSchemeRow&) { return true; }), "q8, q4, int4, mxfp4 or fp8-block");
}

}  // namespace
}  // namespace moerun
