// Fitting t = alpha + bytes * beta by weighted least squares; predicting from the measured points.
#include "comm/link_model.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"

namespace moerun::comm {

LinkModel fit_link_model(const std::vector<std::pair<double, double>>& points) {
  // Minimise sum w (t - a - b x)^2 with w = 1 / t^2: the 2x2 normal equations.
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (const auto& [x, t] : points) {
    if (!(t > 0) || x < 0) fail(ErrorKind::Usage, "link fit: a point of ", x, " bytes in ", t, " s");
    const double w = 1.0 / (t * t);
    sw += w, sx += w * x, sxx += w * x * x, st += w * t, sxt += w * x * t;
  }
  const double det = sw * sxx - sx * sx;
  if (points.size() < 2 || !(std::abs(det) > 0)) fail(ErrorKind::Usage, "link fit: needs two sizes or more");
  double a = (sxx * st - sx * sxt) / det, b = (sw * sxt - sx * st) / det;
  if (a < 0) {
    // No link costs less than nothing per exchange: where the times grow faster than linearly (a
    // shaped link past its bucket), the best line crosses zero; the best one through the origin.
    a = 0;
    b = sxt / sxx;
  }
  LinkModel m{a * 1e6, b > 0 ? 1.0 / (b * 1e9) : 0.0, 0.0, points};
  std::sort(m.measured.begin(), m.measured.end());
  for (const auto& [x, t] : points) m.max_error = std::max(m.max_error, std::abs(m.line_seconds(x) - t) / t);
  return m;
}

double LinkModel::seconds(double bytes) const {
  const auto above = std::lower_bound(measured.begin(), measured.end(), std::pair{bytes, 0.0});
  if (measured.size() < 2 || above == measured.end() || bytes < measured.front().first) return line_seconds(bytes);
  if (above->first == bytes) return above->second;  // also the first size: nothing lies below it
  const auto& [x0, t0] = *(above - 1);
  const auto& [x1, t1] = *above;
  return t0 + (t1 - t0) * (bytes - x0) / (x1 - x0);
}

}  // namespace moerun::comm
