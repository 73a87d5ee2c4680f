// compressed-tensors' pack-quantized INT4: the scheme, the parts of a packed weight, moerun's int4 form.
#include "convert/compressed_tensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/quant_format.hpp"
#include "io/model_file.hpp"

namespace moerun::convert {
using nlohmann::json;

namespace {

constexpr const char* kParts[] = {"_packed", "_scale", "_shape", "_zero_point"};

// A module name matched by one entry of targets or ignore: the name itself, or "re:PATTERN" matched
// from the start (Python's re.match).
bool matches(const std::string& entry, const std::string& module) {
  if (!entry.starts_with("re:")) return entry == module;
  try {
    return std::regex_search(module, std::regex(entry.substr(3)), std::regex_constants::match_continuous);
  } catch (const std::regex_error&) {
    return false;  // a pattern std::regex cannot read covers nothing; read_packed_int4_scheme refused it already
  }
}

std::string text_or(const json& j, const char* key, const std::string& fallback) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

// One config group's weights: 4-bit int groups, weight-only.
void check_group(const json& g, const std::string& where, PackedInt4Scheme& s) {
  if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object()) fail(ErrorKind::BadInput, where, ".weights is missing");
  const json& w = g["weights"];
  const std::string wf = where + ".weights";
  if (!w.contains("num_bits") || w["num_bits"] != 4)
    fail(ErrorKind::BadInput, wf, ".num_bits is ", w.value("num_bits", json()).dump(), "; only 4 is read");
  if (text_or(w, "type", "") != "int") fail(ErrorKind::BadInput, wf, ".type is ", w.value("type", json()).dump(), "; only int is read");
  if (text_or(w, "strategy", "") != "group")
    fail(ErrorKind::BadInput, wf, ".strategy is ", w.value("strategy", json()).dump(), "; only group is read");
  const json gs = w.value("group_size", json());
  if (!gs.is_number_integer() || (gs != 32 && gs != 64 && gs != 128))
    fail(ErrorKind::BadInput, wf, ".group_size is ", gs.dump(), "; 32, 64 or 128 are read");
  if (w.value("actorder", json()) == "group")
    fail(ErrorKind::BadInput, wf, ".actorder is \"group\": activation-ordered groups (g_idx) are not read");
  if (w.value("dynamic", json(false)) != false)
    fail(ErrorKind::BadInput, wf, ".dynamic is ", w["dynamic"].dump(), "; only static weights are read");
  for (const char* act : {"input_activations", "output_activations"})
    if (g.contains(act) && !g[act].is_null())
      fail(ErrorKind::BadInput, where, ".", act, " is set: only weight-only schemes (W4A16) are read, activations stay in float");
  const bool symmetric = w.value("symmetric", json(true)) == true;
  if (s.group_size != 0 && (s.group_size != gs.get<int64_t>() || s.symmetric != symmetric))
    fail(ErrorKind::BadInput, where, ": config groups with different group sizes or symmetry are not read");
  s.group_size = gs.get<int64_t>();
  s.symmetric = symmetric;
  if (!g.contains("targets") || !g["targets"].is_array()) fail(ErrorKind::BadInput, where, ".targets is missing");
  for (const json& t : g["targets"]) {
    if (!t.is_string()) fail(ErrorKind::BadInput, where, ".targets holds ", t.dump(), ", not a name");
    s.targets.push_back(t.get<std::string>());
  }
  const std::string group_format = text_or(g, "format", "pack-quantized");
  if (group_format != "pack-quantized") fail(ErrorKind::BadInput, where, ".format is \"", group_format, "\"; only pack-quantized is read");
}

// std::regex compiles and matches by recursion, a level per term and per group: a pattern from a
// checkpoint is bounded in length and nesting before it is compiled, so that a hostile one is an
// error instead of a stack overflow (30,000 nested groups crashed convert). Real ones are short
// ("re:.*mlp.gate$", "re:model.layers.*.experts.*").
constexpr std::size_t kMaxPatternLength = 1024;
constexpr int kMaxPatternNesting = 32;

void check_pattern(const std::string& entry, const std::string& where) {
  const std::string p = entry.substr(3);
  int depth = 0, deepest = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\')
      ++i;
    else if (p[i] == '(')
      deepest = std::max(deepest, ++depth);
    else if (p[i] == ')')
      --depth;
  }
  if (deepest > kMaxPatternNesting)
    fail(ErrorKind::BadInput, where, ": pattern \"", entry.substr(0, 40), "...\" nests ", deepest, " groups deep; at most ",
         kMaxPatternNesting, " are read");
  if (p.size() > kMaxPatternLength)
    fail(ErrorKind::BadInput, where, ": pattern \"", entry.substr(0, 40), "...\" is ", p.size(), " characters long; at most ",
         kMaxPatternLength, " are read");
  try {
    std::regex r(p);
  } catch (const std::regex_error&) {
    fail(ErrorKind::BadInput, where, ": pattern \"", entry, "\" is not a regular expression this build reads");
  }
}

const SafetensorInfo& part(const HfCheckpoint& ckpt, const std::string& weight, const char* suffix, const std::string& what) {
  const std::string n = weight + suffix;
  if (!ckpt.has(n))
    fail(ErrorKind::BadInput, ckpt.file_of(weight + "_packed"), ": the checkpoint has no ", ckpt.spelled(n), " (", what, ")");
  return ckpt.info(n);
}

void expect_part(const HfCheckpoint& ckpt, const std::string& name, const SafetensorInfo& info, std::initializer_list<const char*> dtypes,
                 const std::vector<int64_t>& shape) {
  bool ok = false;
  std::string want;
  for (const char* d : dtypes) {
    ok = ok || info.dtype == d;
    want += (want.empty() ? "" : " or ") + std::string(d);
  }
  if (!ok) fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " has dtype ", info.dtype, ", expected ", want);
  if (info.shape != shape)
    fail(ErrorKind::BadInput, ckpt.file_of(name), ": tensor ", ckpt.spelled(name), " has shape ", io::shape_str(info.shape), ", expected ",
         io::shape_str(shape));
}

}  // namespace

bool PackedInt4Scheme::covers(const std::string& module) const {
  bool targeted = false;
  for (const std::string& t : targets) targeted = targeted || t == "Linear" || matches(t, module);
  if (!targeted) return false;
  for (const std::string& i : ignore)
    if (matches(i, module)) return false;
  return true;
}

std::optional<PackedInt4Scheme> read_packed_int4_scheme(const json& q, const std::string& where) {
  if (text_or(q, "quant_method", "") != "compressed-tensors") return std::nullopt;
  const std::string format = text_or(q, "format", "pack-quantized");
  if (format != "pack-quantized" && format != "mixed-precision")
    fail(ErrorKind::BadInput, where, ".format is \"", format, "\"; of compressed-tensors only pack-quantized INT4 is read");
  const std::string status = text_or(q, "quantization_status", "compressed");
  if (status != "compressed")
    fail(ErrorKind::BadInput, where, ".quantization_status is \"", status,
         "\": the weights are not packed (only compressed checkpoints are read)");
  if (q.contains("sparsity_config") && !q["sparsity_config"].is_null() && !q["sparsity_config"].empty())
    fail(ErrorKind::BadInput, where, ".sparsity_config is set: sparse checkpoints are not read");
  if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null())
    fail(ErrorKind::BadInput, where, ".kv_cache_scheme is set: a quantized KV cache is not read");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    fail(ErrorKind::BadInput, where, ".config_groups is missing");
  PackedInt4Scheme s;
  for (auto it = q["config_groups"].begin(); it != q["config_groups"].end(); ++it)
    check_group(it.value(), where + ".config_groups." + it.key(), s);
  if (q.contains("ignore")) {
    if (!q["ignore"].is_array()) fail(ErrorKind::BadInput, where, ".ignore is not a list");
    for (const json& i : q["ignore"]) {
      if (!i.is_string()) fail(ErrorKind::BadInput, where, ".ignore holds ", i.dump(), ", not a name");
      s.ignore.push_back(i.get<std::string>());
    }
  }
  for (const auto* list : {&s.targets, &s.ignore})
    for (const std::string& e : *list)
      if (e.starts_with("re:")) check_pattern(e, where);
  return s;
}

bool is_packed_int4_part(const std::string& name, std::string* weight) {
  for (const char* suffix : kParts) {
    const std::string full = std::string(".weight") + suffix;
    if (name.size() > full.size() && name.ends_with(full)) {
      if (weight) *weight = name.substr(0, name.size() - std::strlen(suffix));
      return true;
    }
  }
  return false;
}

void check_packed_int4(const HfCheckpoint& ckpt, const std::string& weight, int64_t rows, int64_t cols) {
  const std::string packed = weight + "_packed";
  if (ckpt.has(weight + "_g_idx"))
    fail(ErrorKind::BadInput, ckpt.file_of(packed), ": tensor ", ckpt.spelled(weight + "_g_idx"),
         " is there: activation-ordered groups are not read");
  if (cols % kQuantGroup != 0)
    fail(ErrorKind::BadInput, ckpt.file_of(packed), ": tensor ", ckpt.spelled(weight), " has ", cols,
         " columns, not a multiple of 32 (INT4 groups)");
  expect_part(ckpt, packed, ckpt.info(packed), {"I32"}, {rows, cols / 8});
  const SafetensorInfo& scale = part(ckpt, weight, "_scale", "its group scales");
  const int64_t groups = scale.shape.size() == 2 ? scale.shape[1] : 0;
  const int64_t g = groups > 0 ? cols / groups : 0;
  if (groups <= 0 || cols % groups != 0 || (g != 32 && g != 64 && g != 128))
    fail(ErrorKind::BadInput, ckpt.file_of(weight + "_scale"), ": tensor ", ckpt.spelled(weight + "_scale"), " has shape ",
         io::shape_str(scale.shape), ": groups of 32, 64 or 128 of ", cols, " columns expected");
  expect_part(ckpt, weight + "_scale", scale, {"BF16", "F16"}, {rows, groups});
  const SafetensorInfo& shape = part(ckpt, weight, "_shape", "the unpacked shape");
  expect_part(ckpt, weight + "_shape", shape, {"I64", "I32"}, {2});
  const std::vector<unsigned char> s = ckpt.read_raw(weight + "_shape");
  int64_t v[2];
  for (int i = 0; i < 2; ++i) {
    if (shape.dtype == "I64")
      std::memcpy(&v[i], s.data() + 8 * i, 8);
    else {
      int32_t x;
      std::memcpy(&x, s.data() + 4 * i, 4);
      v[i] = x;
    }
  }
  if (v[0] != rows || v[1] != cols)
    fail(ErrorKind::BadInput, ckpt.file_of(weight + "_shape"), ": tensor ", ckpt.spelled(weight + "_shape"), " is [", v[0], ", ", v[1],
         "], expected [", rows, ", ", cols, "]");
  if (ckpt.has(weight + "_zero_point"))
    expect_part(ckpt, weight + "_zero_point", ckpt.info(weight + "_zero_point"), {"I32"}, {(rows + 7) / 8, groups});
}

PackedInt4Matrix read_packed_int4(const HfCheckpoint& ckpt, const std::string& weight, int64_t rows, int64_t cols) {
  check_packed_int4(ckpt, weight, rows, cols);
  PackedInt4Matrix m{rows, cols, ckpt.read_raw(weight + "_packed"), {}, {}};
  const SafetensorInfo& si = ckpt.info(weight + "_scale");
  const bool f16 = si.dtype == "F16";
  const int64_t groups = si.shape[1], per = cols / groups, g32 = cols / kQuantGroup;  // shipped groups; groups of 32 in one
  const std::vector<unsigned char> raw = ckpt.read_raw(weight + "_scale");
  std::vector<unsigned char> zp;
  if (ckpt.has(weight + "_zero_point")) zp = ckpt.read_raw(weight + "_zero_point");
  m.scales.resize(static_cast<std::size_t>(rows * g32));
  m.levels.resize(m.scales.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * (r * groups + g), 2);
      const float s = f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
      if (!std::isfinite(s))
        fail(ErrorKind::BadInput, ckpt.file_of(weight + "_scale"), ": tensor ", ckpt.spelled(weight + "_scale"), " contains ",
             std::isnan(s) ? "NaN" : "Inf", " at [", r, ",", g, "]");
      uint8_t z = 8;  // symmetric: q + 8 - 8
      if (!zp.empty()) {
        uint32_t word;
        std::memcpy(&word, zp.data() + 4 * ((r / 8) * groups + g), 4);
        z = static_cast<uint8_t>((word >> (4 * (r % 8))) & 15);  // zero point + 8, as the values
      }
      for (int64_t k = 0; k < per / kQuantGroup; ++k) {
        const std::size_t at = static_cast<std::size_t>(r * g32 + g * (per / kQuantGroup) + k);
        m.scales[at] = bits;
        m.levels[at] = static_cast<uint8_t>(z | (f16 ? kInt4F16Scale : 0));
      }
    }
  return m;
}

std::vector<float> dequantize(const PackedInt4Matrix& m) {
  std::vector<float> out(static_cast<std::size_t>(m.rows * m.cols));
  dequantize_rows(WeightScheme::Int4, m.values.data(), m.scales.data(), m.rows, m.cols, out.data(), m.levels.data());
  return out;
}

}  // namespace moerun::convert

namespace moerun::convert {

void check_int4_tensors(const HfCheckpoint& ckpt) {
  std::vector<std::string> int4;
  for (const std::string& n : ckpt.names())
    if (ckpt.info(n).dtype == "INT4") int4.push_back(n);
  if (int4.empty()) return;
  const json j = json::parse(ckpt.config_text(), nullptr, false);
  const std::string where = ckpt.config_path() + ": field quantization_config";
  const json q = j.is_object() && j.contains("quantization_config") ? j["quantization_config"] : json();
  const std::optional<PackedInt4Scheme> s = q.is_object() ? read_packed_int4_scheme(q, where) : std::nullopt;
  const std::string& first = int4.front();
  if (!s)
    fail(ErrorKind::BadInput, ckpt.file_of(first + "_packed"), ": tensor ", ckpt.spelled(first + "_packed"),
         " is compressed-tensors INT4, but ", ckpt.config_path(), " has no compressed-tensors quantization_config (",
         q.is_null() ? std::string("none") : "quant_method " + q.value("quant_method", json()).dump(), ") to say how to read it");
  for (const std::string& w : int4) {
    const std::string module = w.substr(0, w.size() - std::strlen(".weight")), stored = ckpt.spelled(w);
    if (!s->covers(module) && !s->covers(stored.substr(0, stored.size() - std::strlen(".weight"))))
      fail(ErrorKind::BadInput, where, ": its targets and ignore do not cover ", stored, ", which the checkpoint stores as INT4");
    const bool zero_points = ckpt.has(w + "_zero_point");
    if (zero_points == s->symmetric)
      fail(ErrorKind::BadInput, where, ": weights.symmetric is ", s->symmetric ? "true" : "false", ", but ", stored,
           zero_points ? " has zero points (" : " has none (", ckpt.spelled(w + "_zero_point"), ")");
    if (!ckpt.has(w + "_scale")) continue;  // check_packed_int4 names the missing part
    const SafetensorInfo& scale = ckpt.info(w + "_scale");
    const int64_t cols = ckpt.info(w).shape.back(), groups = scale.shape.size() == 2 ? scale.shape[1] : 0;
    const int64_t g = groups > 0 && cols % groups == 0 ? cols / groups : 0;
    // A size the kernels do not take at all is check_packed_int4's to name.
    if ((g == 32 || g == 64 || g == 128) && g != s->group_size)
      fail(ErrorKind::BadInput, where, ": weights.group_size is ", s->group_size, ", but ", ckpt.spelled(w + "_scale"), " holds groups of ",
           g, " (shape ", io::shape_str(scale.shape), " of ", cols, " columns)");
  }
}

void check_quantization_config_type(const std::string& config_json, const std::string& config_path) {
  const json j = json::parse(config_json, nullptr, false);
  if (j.is_object() && j.contains("quantization_config") && !j["quantization_config"].is_null() && !j["quantization_config"].is_object())
    fail(ErrorKind::BadInput, config_path, ": field quantization_config is ", j["quantization_config"].dump().substr(0, 60),
         ", not an object ({\"quant_method\": ...})");
}

}  // namespace moerun::convert
