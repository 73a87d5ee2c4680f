// The per-layer state kinds of a sequence and the cache that holds them.
#include "runtime/layer_state.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace moerun::runtime {

void RowState::append(const float* kr, const float* vr, int64_t n) {
  k.insert(k.end(), kr, kr + n * k_dim);
  if (v_dim > 0) v.insert(v.end(), vr, vr + n * v_dim);
}

void RowState::trim(int64_t keep) {
  const int64_t drop = rows() - keep;
  if (drop <= 0) return;
  k.erase(k.begin(), k.begin() + drop * k_dim);
  v.erase(v.begin(), v.begin() + drop * v_dim);
  start += drop;
}

void RowState::reserve(int64_t positions) {
  const int64_t n = window > 0 ? std::min(positions, 2 * window) : positions;
  k.reserve(static_cast<std::size_t>(n * k_dim));
  v.reserve(static_cast<std::size_t>(n * v_dim));
}

void KvCache::init(int64_t layers, int64_t k_dim, int64_t v_dim, int64_t reserve, const std::vector<int64_t>& windows) {
  layers_.clear();
  recurrent_layers_ = 0;
  for (int64_t l = 0; l < layers; ++l) {
    RowState r{k_dim, v_dim, windows.empty() ? 0 : windows[static_cast<std::size_t>(l)]};
    r.reserve(reserve);
    layers_.emplace_back(std::move(r));
  }
}

void KvCache::init(const model::ModelConfig& c, int64_t reserve) {
  layers_.clear();
  recurrent_layers_ = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.is_linear_layer(l)) {
      DeltaNetState s;
      s.reset(c.linear);
      layers_.emplace_back(std::move(s));
      ++recurrent_layers_;
      continue;
    }
    RowState r{c.kv_k_dim(), c.kv_v_dim(), c.window_of(l)};
    r.reserve(reserve);
    layers_.emplace_back(std::move(r));
  }
}

RowState& KvCache::row_state(int64_t l) {
  RowState* r = std::get_if<RowState>(&layers_.at(static_cast<std::size_t>(l)));
  if (!r) fail(ErrorKind::Internal, "KvCache: layer ", l, " keeps a recurrent state, not rows");
  return *r;
}

const RowState& KvCache::row_state(int64_t l) const {
  return const_cast<KvCache*>(this)->row_state(l);
}

DeltaNetState& KvCache::recurrent(int64_t l) {
  DeltaNetState* s = std::get_if<DeltaNetState>(&layers_.at(static_cast<std::size_t>(l)));
  if (!s) fail(ErrorKind::Internal, "KvCache: layer ", l, " keeps rows, not a recurrent state");
  return *s;
}

void KvCache::trim_windows() {
  for (LayerState& s : layers_)
    if (RowState* r = std::get_if<RowState>(&s); r && r->window > 0 && r->rows() >= 2 * r->window) r->trim(r->window - 1);
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (const LayerState& s : layers_) {
    if (const RowState* r = std::get_if<RowState>(&s))
      b += static_cast<int64_t>((r->k.capacity() + r->v.capacity()) * sizeof(float));
    else {
      const DeltaNetState& d = std::get<DeltaNetState>(s);
      b += static_cast<int64_t>((d.conv.capacity() + d.recurrent.capacity()) * sizeof(float));
    }
  }
  return b;
}

bool KvCache::holds_from(int64_t s) const {
  for (const LayerState& l : layers_)
    if (const RowState* r = std::get_if<RowState>(&l); r && r->start > s) return false;
  return true;
}

StateBlock KvCache::copy_block(int64_t s, int64_t n) const {
  StateBlock b;
  b.k.resize(layers_.size());
  b.v.resize(layers_.size());
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const RowState* r = std::get_if<RowState>(&layers_[l]);
    if (!r) continue;
    const int64_t row0 = s - r->start;
    b.k[l].assign(r->k.begin() + row0 * r->k_dim, r->k.begin() + (row0 + n) * r->k_dim);
    b.v[l].assign(r->v.begin() + row0 * r->v_dim, r->v.begin() + (row0 + n) * r->v_dim);
  }
  return b;
}

StateBlock KvCache::snapshot() const {
  StateBlock b;
  if (recurrent_layers_ == 0) return b;
  b.after.resize(layers_.size());
  for (std::size_t l = 0; l < layers_.size(); ++l)
    if (const DeltaNetState* d = std::get_if<DeltaNetState>(&layers_[l])) b.after[l] = *d;
  return b;
}

void KvCache::append_block(const StateBlock& b, int64_t n) {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (RowState* r = std::get_if<RowState>(&layers_[l]))
      r->append(b.k[l].data(), b.v[l].data(), n);
    else if (!b.after.empty())
      std::get<DeltaNetState>(layers_[l]) = b.after[l];
  }
}

int64_t StateBlock::bytes() const {
  int64_t n = 0;
  for (std::size_t l = 0; l < k.size(); ++l) n += static_cast<int64_t>((k[l].size() + v[l].size()) * sizeof(float));
  for (const DeltaNetState& s : after) n += static_cast<int64_t>((s.conv.size() + s.recurrent.size()) * sizeof(float));
  return n;
}

}  // namespace moerun::runtime
