// Dense op kernels.
#include "runtime/dense_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/parallel_for.hpp"

namespace moerun::runtime {

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

void embed_tokens(const io::EmbeddingTable& table, const int32_t* ids, int64_t T, float* out) {
  const int64_t d = table.cols;
  AlignedBuffer scratch;  // a row read from the file
  for (int64_t t = 0; t < T; ++t) {
    const void* row = table.row(ids[t], scratch);
    if (table.dtype == DType::F32)
      std::memcpy(out + t * d, row, static_cast<std::size_t>(d) * sizeof(float));
    else
      bf16_to_f32(static_cast<const uint16_t*>(row), out + t * d, static_cast<std::size_t>(d));
  }
}

void rms_norm(const float* x, int64_t T, int64_t d, const float* w, float eps, float* out) {
  parallel_for(T, T * d >= kParallelElements, [&](int64_t t) {
    const float* r = x + t * d;
    float ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += r[i] * r[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    float* o = out + t * d;
    for (int64_t i = 0; i < d; ++i) o[i] = w[i] * (r[i] * inv);
  });
}

namespace {
// yarn's correction range and ramp (modeling_rope_utils._compute_yarn_parameters), the range in
// double as Python computes it, the ramp in fp32 as torch does.
std::vector<float> yarn_inv_freq(const std::vector<float>& pos_freqs, double theta, int64_t dim, const model::RopeScaling& r) {
  const double kPi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(static_cast<double>(r.original_max_position) / (rotations * 2 * kPi))) /
           (2 * std::log(theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as Hugging Face does: no singular ramp
  const float factor = static_cast<float>(r.factor);
  std::vector<float> out(pos_freqs.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float interpolated = 1.0f / (factor * pos_freqs[i]), extrapolated = 1.0f / pos_freqs[i];
    out[i] = interpolated * (1.0f - extrapolation) + extrapolated * extrapolation;
  }
  return out;
}

void llama3_scale(std::vector<float>& inv_freq, const model::RopeScaling& r) {
  const double kPi = 3.14159265358979323846;
  const float old_context = static_cast<float>(r.original_max_position);
  const float low_wavelen = old_context / static_cast<float>(r.low_freq_factor);
  const float high_wavelen = old_context / static_cast<float>(r.high_freq_factor);
  const float factor = static_cast<float>(r.factor);
  for (float& f : inv_freq) {
    const float wavelen = static_cast<float>(2 * kPi) / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth =
        (old_context / wavelen - static_cast<float>(r.low_freq_factor)) / static_cast<float>(r.high_freq_factor - r.low_freq_factor);
    const float smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
}
}  // namespace

RopeFrequencies rope_frequencies(double theta, int64_t hd, const model::RopeScaling& r) {
  const int64_t half = hd / 2;
  RopeFrequencies out;
  std::vector<float> pos_freqs(static_cast<std::size_t>(half));
  out.inv_freq.resize(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    pos_freqs[i] = std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
    out.inv_freq[i] = 1.0f / pos_freqs[i];
  }
  switch (r.type) {
    case model::RopeType::Default: break;
    case model::RopeType::Linear:
      for (float& f : out.inv_freq) f /= static_cast<float>(r.factor);
      break;
    case model::RopeType::Yarn: {
      out.inv_freq = yarn_inv_freq(pos_freqs, theta, hd, r);
      double af = r.attention_factor;
      if (af <= 0)
        af = r.mscale > 0 && r.mscale_all_dim > 0 ? yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim)
                                                  : yarn_mscale(r.factor, 1.0);
      out.attention_scaling = static_cast<float>(af);
      break;
    }
    case model::RopeType::Llama3: llama3_scale(out.inv_freq, r); break;
    case model::RopeType::Dynamic: fail(ErrorKind::Internal, "rope type dynamic reached the forward (ModelConfig::validate refuses it)");
  }
  return out;
}

void rope_apply(float* x, int64_t T, int64_t heads, int64_t hd, const int32_t* positions, const RopeFrequencies& rope) {
  const int64_t half = static_cast<int64_t>(rope.inv_freq.size());  // hd / 2, or less for a partial rotary
  if (2 * half > hd) fail(ErrorKind::Internal, "rope_apply: ", 2 * half, " rotary dims in heads of ", hd);
  const std::vector<float>& inv_freq = rope.inv_freq;
  const float scaling = rope.attention_scaling;
  std::vector<float> cs(static_cast<std::size_t>(half)), sn(static_cast<std::size_t>(half));
  for (int64_t t = 0; t < T; ++t) {
    const float p = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float a = p * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
      if (scaling != 1.0f) {
        cs[i] *= scaling;
        sn[i] *= scaling;
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_row_bias(float* y, int64_t T, int64_t n, const float* b) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[i];
}

void add_sigmoid_gated(float* y, const float* s, const float* x, const float* g, int64_t T, int64_t d) {
  parallel_for(T, T * d >= kParallelElements, [&](int64_t t) {
    float dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += x[t * d + i] * g[i];
    const float gate = 1.0f / (1.0f + std::exp(-dot));
    for (int64_t i = 0; i < d; ++i) y[t * d + i] += gate * s[t * d + i];
  });
}

void multiply_by_sigmoid(float* y, const float* g, int64_t n) {
  parallel_for(n, n >= kParallelElements, [&](int64_t i) { y[i] *= 1.0f / (1.0f + std::exp(-g[i])); });
}

}  // namespace moerun::runtime
