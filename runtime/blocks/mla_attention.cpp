// Multi-head latent attention: projections into the compressed cache, and the absorbed and
// expanded forms of the attention over it.
#include "runtime/blocks/mla_attention.hpp"

#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "runtime/blocks/mixer_block.hpp"

namespace moerun::runtime {
namespace {
// DeepSeek's own modeling code and transformers' build q_a_layernorm and kv_a_layernorm with the
// RMSNorm's default eps, not config.rms_norm_eps (the released configs set both to 1e-6).
constexpr float kLatentNormEps = 1e-6f;

float* fbuf(AlignedBuffer& b, int64_t n) {
  b.resize(static_cast<std::size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
  return b.as<float>();
}
// Rows [r0, r0 + rows) of a plain matrix as a matrix of its own (transposed when asked), packed.
WeightMatrix slice_rows(Matmul& mm, const WeightMatrix& w, int64_t r0, int64_t rows, bool transpose) {
  const std::size_t es = dtype_size(w.dtype);
  WeightMatrix m;
  m.data.place_in(w.data.pool());
  m.allocate(w.dtype, transpose ? w.cols : rows, transpose ? rows : w.cols);
  const auto* src = w.data.as<unsigned char>();
  auto* dst = m.data.as<unsigned char>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      const std::size_t to = transpose ? static_cast<std::size_t>(c * rows + r) : static_cast<std::size_t>(r * w.cols + c);
      std::memcpy(dst + to * es, src + static_cast<std::size_t>((r0 + r) * w.cols + c) * es, es);
    }
  mm.pack(m, 32);
  return m;
}
}  // namespace

MlaMode parse_mla_mode(const std::string& s) {
  if (s == "auto") return MlaMode::Auto;
  if (s == "absorbed") return MlaMode::Absorbed;
  if (s == "expanded") return MlaMode::Expanded;
  fail_config("mla_attention", "'", s, "': expected auto, absorbed or expanded");
}

float mla_softmax_scale(const model::ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim));
  if (c.rope.type != model::RopeType::Default && c.rope.mscale_all_dim != 0) {
    const double m = yarn_mscale(c.rope.factor, c.rope.mscale_all_dim);
    scale *= m * m;
  }
  return static_cast<float>(scale);
}

MlaWeights MlaWeights::take(io::LayerTensors& t, const model::ModelConfig& c, Matmul& mm) {
  MlaWeights w;
  t.take({{"wq", &w.wq}, {"wq_a", &w.wq_a}, {"wq_b", &w.wq_b}, {"wkv_a", &w.wkv_a}, {"wo", &w.wo}},
         {{"q_a_norm", &w.q_a_norm}, {"kv_a_norm", &w.kv_a_norm}});
  w.prepare(t.take_matrix("wkv_b"), c, mm);
  return w;
}

void MlaWeights::prepare(const WeightMatrix& wkv_b, const model::ModelConfig& c, Matmul& mm) {
  if (wkv_b.packed) fail(ErrorKind::Internal, "MlaWeights::prepare: wkv_b is packed already");
  const int64_t nope = c.mla.qk_nope_head_dim, v = c.mla.v_head_dim;
  for (int64_t h = 0; h < c.num_heads; ++h) {
    const int64_t r0 = h * (nope + v);
    uk.push_back(slice_rows(mm, wkv_b, r0, nope, false));
    uk_t.push_back(slice_rows(mm, wkv_b, r0, nope, true));
    uv.push_back(slice_rows(mm, wkv_b, r0 + nope, v, false));
  }
  pack_for_decode(mm, {&wq, &wq_a, &wq_b, &wkv_a, &wo});
}

MlaAttention::MlaAttention(const model::ModelConfig& c, Matmul& mm, MlaMode mode)
    : c_(c), mm_(mm), mode_(mode), rope_(rope_frequencies(c.rope_theta, c.mla.qk_rope_head_dim, c.rope)), scale_(mla_softmax_scale(c)) {}

void MlaAttention::project(const MlaWeights& L, const float* xn, int64_t n, const int32_t* positions, float* rows) {
  const model::MlaShape& m = c_.mla;
  const int64_t H = c_.num_heads, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, qk = nope + rope;
  const int64_t kvl = m.kv_lora_rank, row = c_.kv_k_dim();  // the cache row: latent, RoPE key (DSA: its index key)
  const float eps = kLatentNormEps;
  // q, per head [nope | rope]; split into head-major q_nope (the per-head GEMMs' rows) and q_rope.
  float* q = fbuf(q_, n * H * qk);
  if (m.q_lora_rank > 0) {
    float* qa = fbuf(qa_, n * m.q_lora_rank);
    mm_.linear(xn, n, L.wq_a, qa);
    rms_norm(qa, n, m.q_lora_rank, L.q_a_norm.data(), eps, qa);
    mm_.linear(qa, n, L.wq_b, q);
  } else {
    mm_.linear(xn, n, L.wq, q);
  }
  float* qn = fbuf(q_nope_, H * n * nope);
  float* qr = fbuf(q_rope_, n * H * rope);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(qn + (h * n + t) * nope, q + (t * H + h) * qk, static_cast<std::size_t>(nope) * 4);
      std::memcpy(qr + (t * H + h) * rope, q + (t * H + h) * qk + nope, static_cast<std::size_t>(rope) * 4);
    }
  rope_apply(qr, n, H, rope, positions, rope_);
  // The cache rows: [RMSNorm(c) | RoPE(k_rope)].
  const int64_t a = m.latent_width();
  float* kv = fbuf(kv_a_, n * a);
  float* kr = fbuf(kr_, n * rope);
  mm_.linear(xn, n, L.wkv_a, kv);
  for (int64_t t = 0; t < n; ++t) {
    rms_norm(kv + t * a, 1, kvl, L.kv_a_norm.data(), eps, rows + t * row);
    std::memcpy(kr + t * rope, kv + t * a + kvl, static_cast<std::size_t>(rope) * 4);
  }
  rope_apply(kr, n, 1, rope, positions, rope_);
  for (int64_t t = 0; t < n; ++t) std::memcpy(rows + t * row + kvl, kr + t * rope, static_cast<std::size_t>(rope) * 4);
  n_ = n;
}

void MlaAttention::attend(const MlaWeights& w, int64_t l, const std::vector<MlaChunk>& chunks, int64_t n, float* out) {
  if (n != n_) fail(ErrorKind::Internal, "MlaAttention::attend: ", n, " rows, projected ", n_);
  for (const MlaChunk& ch : chunks) {
    const bool expand = mode_ == MlaMode::Expanded || (mode_ == MlaMode::Auto && ch.prompt);
    if (expand)
      attend_expanded(w, l, ch, out);
    else
      attend_absorbed(w, l, ch, out);
  }
}

void MlaAttention::attend_absorbed(const MlaWeights& L, int64_t l, const MlaChunk& ch, float* out) {
  const model::MlaShape& m = c_.mla;
  const int64_t H = c_.num_heads, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, v = m.v_head_dim;
  const int64_t kvl = m.kv_lora_rank, row = kvl + rope, stride = c_.kv_k_dim(), n = ch.count;
  // q_cat [n][H][kvl + rope] = [W_ukᵀ q_nope | q_rope]: a query against the cached rows as they are.
  float* qc = fbuf(q_cat_, n * H * row);
  float* lat = fbuf(lat_, n * kvl);
  for (int64_t h = 0; h < H; ++h) {
    mm_.linear(q_nope_.as<float>() + (h * n_ + ch.first) * nope, n, L.uk_t[static_cast<std::size_t>(h)], lat);
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(qc + (t * H + h) * row, lat + t * kvl, static_cast<std::size_t>(kvl) * 4);
      std::memcpy(qc + (t * H + h) * row + kvl, q_rope_.as<float>() + ((ch.first + t) * H + h) * rope, static_cast<std::size_t>(rope) * 4);
    }
  }
  // One kv head whose key is the whole row and whose value its latent part: MQA over the cache.
  float* olat = fbuf(head_in_, n * H * kvl);
  AttentionShape shape{H, 1, row, scale_, 0, nullptr, kvl, stride, stride};
  const RowState& kv = ch.kv->row_state(l);
  if (ch.selection) {  // the chosen rows' latent and RoPE key only, gathered
    const AttentionShape gathered{H, 1, row, scale_, 0, nullptr, kvl, row, row};
    attend_selected(ch, qc, H * row, kv.k.data(), stride, row, nullptr, 0, kv.start, gathered, olat, H * kvl);
  } else {
    attention_forward(qc, kv.k.data(), kv.k.data(), kv.start, ch.pos0, n, shape, olat);
  }
  // Each head's output through its W_uv.
  float* hin = fbuf(lat_, n * kvl);
  float* hout = fbuf(head_out_, n * v);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < n; ++t) std::memcpy(hin + t * kvl, olat + (t * H + h) * kvl, static_cast<std::size_t>(kvl) * 4);
    mm_.linear(hin, n, L.uv[static_cast<std::size_t>(h)], hout);
    for (int64_t t = 0; t < n; ++t) std::memcpy(out + ((ch.first + t) * H + h) * v, hout + t * v, static_cast<std::size_t>(v) * 4);
  }
}

void MlaAttention::attend_expanded(const MlaWeights& L, int64_t l, const MlaChunk& ch, float* out) {
  const model::MlaShape& m = c_.mla;
  const int64_t H = c_.num_heads, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, v = m.v_head_dim, qk = nope + rope;
  const int64_t kvl = m.kv_lora_rank, row = c_.kv_k_dim(), n = ch.count;
  const RowState& kv = ch.kv->row_state(l);
  const int64_t S = kv.rows();
  const float* cache = kv.k.data();
  // The cached latents as rows of their own, then every head's k_nope and v for every position.
  float* lat = fbuf(kvb_, S * kvl);
  for (int64_t s = 0; s < S; ++s) std::memcpy(lat + s * kvl, cache + s * row, static_cast<std::size_t>(kvl) * 4);
  float* keys = fbuf(keys_, S * H * qk);
  float* vals = fbuf(vals_, S * H * v);
  float* part = fbuf(lat_, S * std::max(nope, v));
  for (int64_t h = 0; h < H; ++h) {
    mm_.linear(lat, S, L.uk[static_cast<std::size_t>(h)], part);
    for (int64_t s = 0; s < S; ++s) {
      std::memcpy(keys + (s * H + h) * qk, part + s * nope, static_cast<std::size_t>(nope) * 4);
      std::memcpy(keys + (s * H + h) * qk + nope, cache + s * row + kvl, static_cast<std::size_t>(rope) * 4);
    }
    mm_.linear(lat, S, L.uv[static_cast<std::size_t>(h)], part);
    for (int64_t s = 0; s < S; ++s) std::memcpy(vals + (s * H + h) * v, part + s * v, static_cast<std::size_t>(v) * 4);
  }
  float* qf = fbuf(q_full_, n * H * qk);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(qf + (t * H + h) * qk, q_nope_.as<float>() + (h * n_ + ch.first + t) * nope, static_cast<std::size_t>(nope) * 4);
      std::memcpy(qf + (t * H + h) * qk + nope, q_rope_.as<float>() + ((ch.first + t) * H + h) * rope, static_cast<std::size_t>(rope) * 4);
    }
  AttentionShape shape{H, H, qk, scale_, 0, nullptr, v, 0, 0};
  if (ch.selection)
    attend_selected(ch, qf, H * qk, keys, H * qk, H * qk, vals, H * v, kv.start, shape, out + ch.first * H * v, H * v);
  else
    attention_forward(qf, keys, vals, kv.start, ch.pos0, n, shape, out + ch.first * H * v);
}

void MlaAttention::attend_selected(const MlaChunk& ch, const float* q, int64_t q_width, const float* k, int64_t k_stride, int64_t k_width,
                                   const float* v, int64_t v_width, int64_t kv_start, const AttentionShape& shape, float* out,
                                   int64_t out_width) {
  const DsaSelection& sel = *ch.selection;
  for (int64_t t = 0; t < ch.count; ++t) {
    const int64_t b = sel.offsets[static_cast<std::size_t>(t)], e = sel.offsets[static_cast<std::size_t>(t) + 1];
    float* gk = fbuf(gk_, (e - b) * k_width);
    float* gv = v ? fbuf(gv_, (e - b) * v_width) : gk;
    for (int64_t j = b; j < e; ++j) {
      const int64_t r = sel.positions[static_cast<std::size_t>(j)] - kv_start;
      std::memcpy(gk + (j - b) * k_width, k + r * k_stride, static_cast<std::size_t>(k_width) * 4);
      if (v) std::memcpy(gv + (j - b) * v_width, v + r * v_width, static_cast<std::size_t>(v_width) * 4);
    }
    // The gathered rows as a cache of positions 0 .. e-b-1 and the query as the last of them.
    attention_forward(q + t * q_width, gk, gv, 0, e - b - 1, 1, shape, out + t * out_width);
  }
}

}  // namespace moerun::runtime
