// Safetensors reader: hand-made files (header length, JSON header, data), good and malformed.
// Every malformed one must be BadInput naming the file (and the tensor where there is one), never
// a read past the data or an allocation sized from an unchecked header.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "tests/test_support.hpp"
#include "convert/safetensors.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override { dir = moerun::testing::scratch_dir("st"); }
  void TearDown() override { fs::remove_all(dir); }
  // A file with this header (padded to 8) and these data bytes.
  std::string make(const std::string& header, const std::string& data, int64_t claimed_len = -1) {
    std::string h = header;
    while (h.size() % 8) h += ' ';
    const uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : h.size();
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    const std::string p = (dir / "x.safetensors").string();
    std::ofstream(p, std::ios::binary) << bytes << h << data;
    return p;
  }
  std::string error_of(const std::string& path) {
    try {
      convert::SafetensorsFile f(path);
      for (const auto& [name, info] : f.tensors()) f.read_f32(name);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
      return e.what();
    }
    return "";
  }
  fs::path dir;
};

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST_F(Safetensors, ReadsF32Bf16AndF16AsFloat32) {
  std::string data = floats({1.5f, -2.0f, 0.25f, 3.0f});
  const uint16_t bf[2] = {f32_to_bf16(0.5f), f32_to_bf16(-8.0f)};
  const uint16_t h16[3] = {0x3c00 /*1*/, 0xc000 /*-2*/, 0x0001 /*2^-24*/};
  data.append(reinterpret_cast<const char*>(bf), 4);
  data.append(reinterpret_cast<const char*>(h16), 6);
  const std::string p = make(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},)"
                             R"("c":{"dtype":"F16","shape":[3],"data_offsets":[20,26]},"__metadata__":{"format":"pt"}})",
                             data);
  convert::SafetensorsFile f(p);
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.info("a").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f.read_f32("a"), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
  EXPECT_EQ(f.read_f32("b"), (std::vector<float>{0.5f, -8.0f}));
  EXPECT_EQ(f.read_f32("c"), (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24)}));
}

TEST_F(Safetensors, MalformedFilesNameTheFileAndTensor) {
  const std::string d = floats({1, 2, 3, 4});
  auto has = [&](const std::string& msg, const std::string& want) {
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_NE(msg.find("x.safetensors"), std::string::npos) << msg;
  };
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d.substr(0, 10))), "tensor a: data ends at byte");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d, 1 << 20)), "header of 1048576 bytes");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d, int64_t{1} << 40)), "beyond the format's 100 MB");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", d)), "header: not valid JSON at byte");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", d)), "tensor a: holds 16 bytes");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", d)), "tensor a: data_offsets run backwards");
  has(error_of(make(R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", d)), "tensor a: unknown dtype Q4");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", d)), "tensor a: shape is not");
  has(error_of(make(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,16]}})", d)), "more than 2^40 elements");
  has(error_of(make(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", d)), "tensor a has dtype I64");
  has(error_of(make(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", d)), "lacks dtype");
  const std::string tiny = (dir / "x.safetensors").string();
  std::ofstream(tiny, std::ios::binary) << "abc";
  has(error_of(tiny), "too short");
}

TEST_F(Safetensors, OverlappingTensorsAreRefused) {  // w1 aliasing w3 would convert into a wrong model
  const std::string p = make(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                             R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                             floats({1, 2, 3}));
  const std::string e = error_of(p);
  EXPECT_NE(e.find("tensor b: data_offsets [4, 12) overlap those of a [0, 8)"), std::string::npos) << e;
  // Adjacent is fine.
  EXPECT_EQ(error_of(make(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                          floats({1, 2, 3}))),
            "");
}

TEST_F(Safetensors, IdentityChangesWithTheBytesEvenAtTheSameMtime) {
  const std::string p = make(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", floats({1, 2}));
  const uint64_t before = convert::SafetensorsFile(p).identity();
  struct stat sb {};
  ASSERT_EQ(::stat(p.c_str(), &sb), 0);
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  const struct timespec times[2] = {sb.st_atim, sb.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);  // as touch -r would
  EXPECT_NE(convert::SafetensorsFile(p).identity(), before);
  EXPECT_EQ(convert::SafetensorsFile(p).identity(), convert::SafetensorsFile(p).identity());
}

}  // namespace
}  // namespace moerun::io
