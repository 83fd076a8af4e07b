// The fits: robust latency + bandwidth lines, their piecewise (protocol) version, the GEMM
// efficiency curve and the interference factor.
//
// Own code, on purpose: every fit here is a two-parameter linear least-squares problem (a 2x2
// normal system with a closed form), made robust by iteratively reweighted least squares with
// Huber weights, plus an exhaustive search over at most two breakpoints. No numerics library
// is a dependency of the project (Debian's Eigen, GSL or Ceres would be new build
// dependencies on every machine) and the solve they would replace is a few lines.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "calibrate/calibrate.h"

namespace fsdpsim::calibrate {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    m = 0.5 * (m + lower);
  }
  return m;
}

// Weighted least squares of t = a + c x on relative residuals (t - a - c x) / t, a >= 0, c >= 0.
LineFit solve_line(const double* x, const double* t, const double* w, std::size_t n) {
  double s = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = w[i] / (t[i] * t[i]);
    s += v;
    sx += v * x[i];
    sxx += v * x[i] * x[i];
    st += v * t[i];
    sxt += v * x[i] * t[i];
  }
  LineFit f;
  f.points = static_cast<int>(n);
  const double det = s * sxx - sx * sx;
  if (n >= 2 && det > 1e-300 * std::max(1.0, s * sxx)) {
    f.seconds_per_byte = (s * sxt - sx * st) / det;
    f.alpha_seconds = (sxx * st - sx * sxt) / det;
  } else {
    f.alpha_seconds = s > 0 ? st / s : 0;
  }
  if (f.alpha_seconds < 0) {  // a pure bandwidth line
    f.alpha_seconds = 0;
    f.seconds_per_byte = sxx > 0 ? sxt / sxx : 0;
  }
  if (f.seconds_per_byte < 0) {  // a pure latency line
    f.seconds_per_byte = 0;
    f.alpha_seconds = s > 0 ? st / s : 0;
  }
  return f;
}

double relative_rss(const LineFit& f, const double* x, const double* t, std::size_t n) {
  double r = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = (t[i] - f.at(x[i])) / t[i];
    r += e * e;
  }
  return r;
}

LineFit robust_line(const double* x, const double* t, std::size_t n) {
  std::vector<double> w(n, 1.0);
  LineFit f = solve_line(x, t, w.data(), n);
  for (int iteration = 0; iteration < 20; ++iteration) {
    std::vector<double> r(n);
    for (std::size_t i = 0; i < n; ++i) r[i] = std::abs((t[i] - f.at(x[i])) / t[i]);
    const double scale = std::max(1.4826 * median_of(r), 1e-4);
    const double k = 1.345 * scale;  // Huber's constant: 95% efficiency under Gaussian noise
    for (std::size_t i = 0; i < n; ++i) w[i] = r[i] <= k ? 1.0 : k / r[i];
    const LineFit next = solve_line(x, t, w.data(), n);
    const bool converged = std::abs(next.alpha_seconds - f.alpha_seconds) <= 1e-12 * std::max(1e-30, f.alpha_seconds) &&
                           std::abs(next.seconds_per_byte - f.seconds_per_byte) <=
                               1e-12 * std::max(1e-30, f.seconds_per_byte);
    f = next;
    if (converged) break;
  }
  return f;
}

void check_points(const std::vector<double>& x, const std::vector<double>& t, const char* what) {
  if (x.size() != t.size()) throw std::invalid_argument(std::string(what) + ": x and t differ in length");
  if (x.empty()) throw std::invalid_argument(std::string(what) + ": no measurements to fit");
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(t[i] > 0) || !std::isfinite(t[i]) || !(x[i] >= 0) || !std::isfinite(x[i]))
      throw std::invalid_argument(std::string(what) + ": measurement " + std::to_string(i) +
                                  " is not a positive finite time at a non-negative size");
}

}  // namespace

Stats stats_of(std::vector<double> seconds) {
  Stats s;
  if (seconds.empty()) return s;
  s.repetitions = static_cast<int>(seconds.size());
  s.min_seconds = *std::min_element(seconds.begin(), seconds.end());
  s.max_seconds = *std::max_element(seconds.begin(), seconds.end());
  s.median_seconds = median_of(std::move(seconds));
  return s;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& t) {
  check_points(x, t, "fit_line");
  return robust_line(x.data(), t.data(), x.size());
}

double PiecewiseFit::at(double x) const {
  if (segments.empty()) return 0;
  std::size_t s = 0;
  while (s < crossovers_x.size() && x >= crossovers_x[s]) ++s;
  return segments[std::min(s, segments.size() - 1)].at(x);
}

PiecewiseFit fit_piecewise(const std::vector<double>& x_in, const std::vector<double>& t_in, int max_segments,
                           int min_points) {
  check_points(x_in, t_in, "fit_piecewise");
  std::vector<std::size_t> order(x_in.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x_in[a] < x_in[b]; });
  std::vector<double> x, t;
  for (std::size_t i : order) {
    x.push_back(x_in[i]);
    t.push_back(t_in[i]);
  }
  const std::size_t n = x.size();
  min_points = std::max(min_points, 2);
  const std::vector<double> ones(n, 1.0);
  auto plain = [&](std::size_t a, std::size_t b) { return solve_line(x.data() + a, t.data() + a, ones.data(), b - a); };
  auto rss = [&](std::size_t a, std::size_t b, const LineFit& f) {
    return relative_rss(f, x.data() + a, t.data() + a, b - a);
  };
  // Bayesian information criterion over segmentations: 3 parameters per segment (latency,
  // bandwidth, where it starts) less one. A segmentation counts only if the lines are what a
  // fastest-of-protocols curve gives: each later segment has the higher bandwidth and latency.
  auto bic = [&](double r, int segments) {
    return static_cast<double>(n) * std::log(std::max(r, 1e-300) / static_cast<double>(n)) +
           (3.0 * segments - 1) * std::log(static_cast<double>(n));
  };
  std::vector<std::size_t> best_cuts;
  double best = bic(rss(0, n, plain(0, n)), 1);
  const std::size_t p = static_cast<std::size_t>(min_points);
  auto consider = [&](const std::vector<std::size_t>& cuts) {
    std::vector<std::size_t> bounds = {0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(n);
    double r = 0;
    double previous_c = std::numeric_limits<double>::infinity(), previous_a = -1;
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
      const LineFit f = plain(bounds[s], bounds[s + 1]);
      // Each later line must have more bandwidth AND more latency: a line better on both
      // counts would be the fastest everywhere, and the fastest-of-lines model would never
      // use the earlier one.
      if (!(f.seconds_per_byte < previous_c) || !(f.alpha_seconds > previous_a)) return;
      previous_c = f.seconds_per_byte;
      previous_a = f.alpha_seconds;
      r += rss(bounds[s], bounds[s + 1], f);
    }
    const double b = bic(r, static_cast<int>(cuts.size()) + 1);
    if (b < best) {
      best = b;
      best_cuts = cuts;
    }
  };
  if (max_segments >= 2)
    for (std::size_t c1 = p; c1 + p <= n; ++c1) consider({c1});
  if (max_segments >= 3)
    for (std::size_t c1 = p; c1 + 2 * p <= n; ++c1)
      for (std::size_t c2 = c1 + p; c2 + p <= n; ++c2) consider({c1, c2});

  PiecewiseFit out;
  std::vector<std::size_t> bounds = {0};
  bounds.insert(bounds.end(), best_cuts.begin(), best_cuts.end());
  bounds.push_back(n);
  // Each segment is fitted without the point next to each of its boundaries: near a crossover
  // the two lines are within noise of each other and the point may belong to either; kept, it
  // biases both lines towards each other (and the crossover with them).
  auto fit_segments = [&] {
    out.segments.clear();
    const std::size_t last = bounds.size() - 2;
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
      std::size_t a = bounds[s], b = bounds[s + 1];
      if (s > 0 && b - a > p) ++a;
      if (s < last && b - a > p) --b;
      out.segments.push_back(robust_line(x.data() + a, t.data() + a, b - a));
    }
  };
  fit_segments();
  // Refinement: the curve is the fastest of the lines, so each point belongs to the line that
  // is lowest there; move the boundaries accordingly and refit, until they stay put. (Points
  // just past a crossover would otherwise pull the neighbouring lines towards each other.)
  for (int iteration = 0; iteration < 10 && out.segments.size() > 1; ++iteration) {
    std::vector<std::size_t> next = {0};
    for (std::size_t s = 0; s + 1 < out.segments.size(); ++s) {
      std::size_t b = next.back() + p;
      while (b + p * (out.segments.size() - 1 - s) < n && out.segments[s].at(x[b]) <= out.segments[s + 1].at(x[b]))
        ++b;
      next.push_back(std::min(b, n - p * (out.segments.size() - 1 - s)));
    }
    next.push_back(n);
    if (next == bounds) break;
    bounds = next;
    fit_segments();
  }
  // The robust refit must keep the order too; where it does not, one line describes the data.
  for (std::size_t s = 0; s + 1 < out.segments.size(); ++s)
    if (!(out.segments[s + 1].seconds_per_byte < out.segments[s].seconds_per_byte) ||
        !(out.segments[s + 1].alpha_seconds > out.segments[s].alpha_seconds)) {
      bounds = {0, n};
      fit_segments();
      break;
    }
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    out.segment_min_x.push_back(x[bounds[s]]);
    out.segment_max_x.push_back(x[bounds[s + 1] - 1]);
  }
  for (std::size_t s = 0; s + 1 < out.segments.size(); ++s) {
    const LineFit& a = out.segments[s];
    const LineFit& b = out.segments[s + 1];
    double cross = std::sqrt(out.segment_max_x[s] * out.segment_min_x[s + 1]);  // between the two ranges
    if (a.seconds_per_byte > b.seconds_per_byte && b.alpha_seconds > a.alpha_seconds)
      cross = (b.alpha_seconds - a.alpha_seconds) / (a.seconds_per_byte - b.seconds_per_byte);
    out.crossovers_x.push_back(cross);
  }
  return out;
}

GemmCeiling solve_gemm_ceiling(const planner::GemmShape& shape, double measured_seconds, planner::GemmDevice device) {
  if (!(measured_seconds > 0)) throw std::invalid_argument("solve_gemm_ceiling: the measured time must be positive");
  auto seconds_at = [&](double e) {
    device.large_gemm_efficiency = e;
    return planner::estimate_gemm(shape, device).seconds;
  };
  if (seconds_at(1.0) > measured_seconds) return {1.0, true};
  // The model's time falls as the ceiling rises (every plan's k loop runs at a rate that scales
  // with it), so bisect on log e between a ceiling far too slow and 1.
  double lo = 1e-9, hi = 1.0;
  if (seconds_at(lo) < measured_seconds) return {lo, false};
  for (int i = 0; i < 200 && hi / lo > 1 + 1e-13; ++i) {
    const double mid = std::sqrt(lo * hi);
    (seconds_at(mid) > measured_seconds ? lo : hi) = mid;
  }
  return {hi, false};
}

double fit_interference(const std::vector<double>& alone, const std::vector<double>& beside) {
  if (alone.empty() || alone.size() != beside.size())
    throw std::invalid_argument("fit_interference: need pairs of (alone, beside) times");
  std::vector<double> ratios;
  for (std::size_t i = 0; i < alone.size(); ++i) {
    if (!(alone[i] > 0) || !(beside[i] > 0))
      throw std::invalid_argument("fit_interference: times must be positive");
    ratios.push_back(beside[i] / alone[i]);
  }
  return std::max(0.0, median_of(ratios) - 1);
}

std::vector<ErrorSummary> summarize_errors(const std::vector<FitError>& errors) {
  std::vector<ErrorSummary> out;
  std::vector<std::vector<double>> abs_errors;
  for (const FitError& e : errors) {
    auto it = std::find_if(out.begin(), out.end(), [&](const ErrorSummary& s) { return s.what == e.what; });
    if (it == out.end()) {
      out.push_back({e.what});
      abs_errors.emplace_back();
      it = out.end() - 1;
    }
    const std::size_t i = static_cast<std::size_t>(it - out.begin());
    abs_errors[i].push_back(std::abs(e.error()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].points = static_cast<int>(abs_errors[i].size());
    out[i].max_abs_error = *std::max_element(abs_errors[i].begin(), abs_errors[i].end());
    out[i].median_abs_error = median_of(abs_errors[i]);
  }
  return out;
}

}  // namespace fsdpsim::calibrate
