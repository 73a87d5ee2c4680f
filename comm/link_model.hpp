// The alpha-beta model of an exchange over one kind of link (shared memory, TCP over a shaped link):
// t(bytes) = alpha + bytes / bandwidth, fitted to measured (bytes, time) points (`bench a2a`), and
// used to predict an exchange's time from the bytes it moves. Between the sizes it was measured at,
// the prediction follows the measured times (each neighbouring pair its own alpha and beta): one
// line over 1 KiB..4 MiB misses a shaped link's knees by up to 2x, where the points do not.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace moerun::comm {

struct LinkModel {
  double alpha_us = 0;  // fixed cost per exchange (latency, synchronisation, per-message work)
  double bandwidth_gbps = 0;  // GB/s (1e9 bytes) the exchange moves its bytes at
  double max_error = 0;  // the line's largest |predicted - measured| / measured over its points
  std::vector<std::pair<double, double>> measured;  // (bytes, seconds) by bytes; empty: the line alone

  double line_seconds(double bytes) const { return alpha_us * 1e-6 + (bandwidth_gbps > 0 ? bytes / (bandwidth_gbps * 1e9) : 0.0); }
  // The measured times interpolated where `bytes` lies between two measured sizes; the line elsewhere.
  double seconds(double bytes) const;
};

// Least squares in relative error (each point weighted by 1 / time^2, so the small exchanges that
// fix alpha count as much as the large ones that fix the bandwidth) over (bytes, seconds) points;
// at least two points of different sizes (Usage error otherwise). Alpha is never negative: where
// the best line would cross zero, the best one through the origin. Keeps the points (`measured`).
LinkModel fit_link_model(const std::vector<std::pair<double, double>>& bytes_seconds);

}  // namespace moerun::comm
