// SVG line/scatter charts: the data's range -> axes with nice ticks -> pixels. Plain string
// building; every number that reaches the SVG is finite (skipped points never do).
#include "nanochat/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "nanochat/common/error.h"

namespace nanochat {

namespace {

const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// %g without the exponent's '+' and leading zeros: 2.5e+18 -> 2.5e18, 1e-05 -> 1e-5
std::string compact_g(double v, int significant) {
  std::string s = strprintf("%.*g", significant, v);
  size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  bool neg = !exp.empty() && exp[0] == '-';
  if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) exp.erase(0, 1);
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
  return mant + "e" + (neg ? "-" : "") + exp;
}

// an axis in value space: [lo, hi] and its ticks with labels
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;
  std::vector<std::pair<double, std::string>> ticks;
  // 0..1 along the axis
  double frac(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
};

// 1, 2 or 5 times a power of ten, the smallest >= raw
double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10 * p;
}

Axis linear_axis(double mn, double mx) {
  Axis a;
  if (mn == mx) {  // one value: a band around it
    const double pad = mn == 0 ? 1.0 : std::fabs(mn) * 0.1;
    mn -= pad;
    mx += pad;
  }
  const double step = nice_step((mx - mn) / 6.0);
  const double k0 = std::floor(mn / step + 1e-9), k1 = std::ceil(mx / step - 1e-9);
  a.lo = k0 * step;
  a.hi = k1 * step;
  const double biggest = std::max(std::fabs(a.lo), std::fabs(a.hi));
  const bool fixed = biggest < 1e6 && step >= 1e-4;
  const int decimals = std::max(0, (int)-std::floor(std::log10(step) + 1e-9));
  const int significant = std::clamp((int)(std::floor(std::log10(biggest)) - std::floor(std::log10(step) + 1e-9)) + 1,
                                     1, 12);
  for (double k = k0; k <= k1 + 0.5; k += 1) {
    double v = k * step;
    if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0"
    a.ticks.emplace_back(v, fixed ? strprintf("%.*f", decimals, v) : (v == 0 ? "0" : compact_g(v, significant)));
  }
  return a;
}

Axis log_axis(double mn, double mx) {
  Axis a;
  a.log = true;
  double l0 = std::log10(mn), l1 = std::log10(mx);
  if (l1 - l0 < 1e-9) {  // one value: a factor of two either side
    l0 -= 0.30103;
    l1 += 0.30103;
  }
  // the data's range with 5% room; ticks at powers of ten when two or more fall inside, else
  // at 1-2-5 (or 1..9) times powers of ten, else at the two ends
  const double pad = 0.05 * (l1 - l0);
  a.lo = std::pow(10.0, l0 - pad);
  a.hi = std::pow(10.0, l1 + pad);
  const int d0 = (int)std::floor(l0 - pad) - 1, d1 = (int)std::ceil(l1 + pad);
  const int stride = std::max(1, (d1 - d0) / 8);
  for (const std::vector<double>& mult :
       {std::vector<double>{1}, std::vector<double>{1, 2, 5}, std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    a.ticks.clear();
    for (int d = d0; d <= d1; d++) {
      if (mult.size() == 1 && d % stride != 0) continue;
      for (double m : mult) {
        const double v = m * std::pow(10.0, d);
        if (v >= a.lo * (1 - 1e-12) && v <= a.hi * (1 + 1e-12)) a.ticks.emplace_back(v, compact_g(v, 3));
      }
    }
    if (a.ticks.size() >= (mult.size() == 1 ? 2u : 3u)) return a;
  }
  if (a.ticks.size() < 2) a.ticks = {{a.lo, compact_g(a.lo, 3)}, {a.hi, compact_g(a.hi, 3)}};
  return a;
}

// the points of series i as they will be drawn (fit: sampled), skipping the undrawable
std::vector<std::pair<double, double>> drawn_points(const Chart& chart, size_t i) {
  const ChartSeries& s = chart.series[i];
  std::vector<std::pair<double, double>> out;
  if (s.kind != ChartKind::fit) {
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t k = 0; k < n; k++)
      if (drawable(s.x[k], chart.x_log) && drawable(s.y[k], chart.y_log)) out.emplace_back(s.x[k], s.y[k]);
    return out;
  }
  if (!s.f || s.fit_samples < 2) return out;
  double x0 = s.fit_x_min, x1 = s.fit_x_max;
  if (x0 == 0 && x1 == 0) {  // the x range of the data series
    x0 = INFINITY;
    x1 = -INFINITY;
    for (size_t j = 0; j < chart.series.size(); j++) {
      if (chart.series[j].kind == ChartKind::fit) continue;
      for (const auto& [x, y] : drawn_points(chart, j)) {
        x0 = std::min(x0, x);
        x1 = std::max(x1, x);
      }
    }
  }
  if (!drawable(x0, chart.x_log) || !drawable(x1, chart.x_log) || x1 < x0) return out;
  for (int k = 0; k < s.fit_samples; k++) {
    const double t = (double)k / (s.fit_samples - 1);
    const double x = chart.x_log ? x0 * std::pow(x1 / x0, t) : x0 + (x1 - x0) * t;
    const double y = s.f(x);
    if (drawable(y, chart.y_log)) out.emplace_back(x, y);
  }
  return out;
}

std::string num(double v) { return strprintf("%.1f", v); }

}  // namespace

ChartSeries chart_line(const std::string& name, std::vector<double> x, std::vector<double> y) {
  ChartSeries s;
  s.name = name;
  s.kind = ChartKind::line;
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

ChartSeries chart_points(const std::string& name, std::vector<double> x, std::vector<double> y) {
  ChartSeries s = chart_line(name, std::move(x), std::move(y));
  s.kind = ChartKind::points;
  return s;
}

ChartSeries chart_fit(const std::string& name, std::function<double(double)> f, double x_min, double x_max,
                      int samples) {
  ChartSeries s;
  s.name = name;
  s.kind = ChartKind::fit;
  s.f = std::move(f);
  s.fit_x_min = x_min;
  s.fit_x_max = x_max;
  s.fit_samples = samples;
  return s;
}

int64_t chart_drawn_count(const Chart& chart, size_t i) { return (int64_t)drawn_points(chart, i).size(); }

std::string chart_render_svg(const Chart& chart) {
  const double W = std::max(chart.width, 200), H = std::max(chart.height, 150);
  const double left = 76, right = 16, top = 34, bottom = 50;
  const double px0 = left, px1 = W - right, py0 = H - bottom, py1 = top;  // plot area (y grows down)

  std::vector<std::vector<std::pair<double, double>>> points;
  double xmn = INFINITY, xmx = -INFINITY, ymn = INFINITY, ymx = -INFINITY;
  for (size_t i = 0; i < chart.series.size(); i++) {
    points.push_back(drawn_points(chart, i));
    for (const auto& [x, y] : points.back()) {
      xmn = std::min(xmn, x);
      xmx = std::max(xmx, x);
      ymn = std::min(ymn, y);
      ymx = std::max(ymx, y);
    }
  }
  const bool empty = !(xmn <= xmx);
  if (empty) {
    xmn = ymn = 1;
    xmx = ymx = 10;
  }
  const Axis ax = chart.x_log ? log_axis(xmn, xmx) : linear_axis(xmn, xmx);
  // a linear y axis gets 3% room either side, so no curve runs along the frame
  const double ypad = chart.y_log ? 0 : 0.03 * (ymx - ymn);
  const Axis ay = chart.y_log ? log_axis(ymn, ymx) : linear_axis(ymn - ypad, ymx + ypad);
  auto sx = [&](double x) { return px0 + ax.frac(x) * (px1 - px0); };
  auto sy = [&](double y) { return py0 - ay.frac(y) * (py0 - py1); };

  std::string o = strprintf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      (int)W, (int)H, (int)W, (int)H);
  o += "<title>" + xml_escape(chart.title) + "</title>\n";
  o += strprintf("<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", (int)W, (int)H);
  o += "<text class=\"title\" x=\"" + num(W / 2) +
       "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" + xml_escape(chart.title) +
       "</text>\n";

  // grid, ticks and their labels
  o += "<g class=\"axes\" stroke=\"#dddddd\" stroke-width=\"1\">\n";
  for (const auto& [v, label] : ax.ticks)
    o += "<line x1=\"" + num(sx(v)) + "\" y1=\"" + num(py0) + "\" x2=\"" + num(sx(v)) + "\" y2=\"" + num(py1) +
         "\"/>\n";
  for (const auto& [v, label] : ay.ticks)
    o += "<line x1=\"" + num(px0) + "\" y1=\"" + num(sy(v)) + "\" x2=\"" + num(px1) + "\" y2=\"" + num(sy(v)) +
         "\"/>\n";
  o += "</g>\n";
  o += "<rect x=\"" + num(px0) + "\" y=\"" + num(py1) + "\" width=\"" + num(px1 - px0) + "\" height=\"" +
       num(py0 - py1) + "\" fill=\"none\" stroke=\"#333333\"/>\n";
  o += "<g class=\"ticks\" fill=\"#333333\">\n";
  for (const auto& [v, label] : ax.ticks)
    o += "<text x=\"" + num(sx(v)) + "\" y=\"" + num(py0 + 15) + "\" text-anchor=\"middle\">" + xml_escape(label) +
         "</text>\n";
  for (const auto& [v, label] : ay.ticks)
    o += "<text x=\"" + num(px0 - 5) + "\" y=\"" + num(sy(v) + 4) + "\" text-anchor=\"end\">" + xml_escape(label) +
         "</text>\n";
  o += "</g>\n";
  o += "<text class=\"xlabel\" x=\"" + num((px0 + px1) / 2) + "\" y=\"" + num(H - 12) +
       "\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(chart.x_label + (chart.x_log ? " (log)" : "")) +
       "</text>\n";
  o += "<text class=\"ylabel\" transform=\"translate(16," + num((py0 + py1) / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" +
       xml_escape(chart.y_label + (chart.y_log ? " (log)" : "")) + "</text>\n";
  if (empty)
    o += "<text class=\"nodata\" x=\"" + num((px0 + px1) / 2) + "\" y=\"" + num((py0 + py1) / 2) +
         "\" text-anchor=\"middle\" fill=\"#888888\">no data</text>\n";

  // the series; a fit without a color takes the color of the series before it
  std::vector<std::string> colors;
  size_t next_color = 0;
  for (size_t i = 0; i < chart.series.size(); i++) {
    const ChartSeries& s = chart.series[i];
    std::string color = s.color;
    if (color.empty() && s.kind == ChartKind::fit && i > 0) color = colors[i - 1];
    if (color.empty()) color = kPalette[next_color++ % (sizeof kPalette / sizeof kPalette[0])];
    colors.push_back(color);
    const auto& pts = points[i];
    const char* kind = s.kind == ChartKind::line ? "line" : s.kind == ChartKind::points ? "points" : "fit";
    o += "<g class=\"series\" data-name=\"" + xml_escape(s.name) + "\" data-kind=\"" + kind + "\" data-n=\"" +
         std::to_string(pts.size()) + "\">\n";
    if (!s.name.empty()) o += "<title>" + xml_escape(s.name) + "</title>\n";
    if (s.kind != ChartKind::points) {
      std::string coords;
      for (const auto& [x, y] : pts) coords += (coords.empty() ? "" : " ") + num(sx(x)) + "," + num(sy(y));
      o += std::string("<polyline class=\"") + (s.kind == ChartKind::fit ? "fit" : "line") + "\" points=\"" + coords +
           "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\"" +
           (s.kind == ChartKind::fit ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
      if (s.kind == ChartKind::line && pts.size() <= 60)
        for (const auto& [x, y] : pts)
          o += "<circle class=\"mk\" cx=\"" + num(sx(x)) + "\" cy=\"" + num(sy(y)) + "\" r=\"2.5\" fill=\"" + color +
               "\"/>\n";
    } else {
      for (const auto& [x, y] : pts)
        o += "<circle class=\"pt\" cx=\"" + num(sx(x)) + "\" cy=\"" + num(sy(y)) + "\" r=\"4\" fill=\"" + color +
             "\"><title>" + compact_g(x, 4) + ", " + compact_g(y, 4) + "</title></circle>\n";
    }
    o += "</g>\n";
  }

  // the legend, top right inside the plot: the named series
  std::vector<size_t> named;
  size_t longest = 0;
  for (size_t i = 0; i < chart.series.size(); i++)
    if (!chart.series[i].name.empty()) {
      named.push_back(i);
      longest = std::max(longest, chart.series[i].name.size());
    }
  if (!named.empty()) {
    const double lw = 34 + 6.5 * (double)longest, lh = 16 * (double)named.size() + 6;
    const double lx = px1 - lw - 6, ly = py1 + 6;
    o += "<g class=\"legend\">\n<rect x=\"" + num(lx) + "\" y=\"" + num(ly) + "\" width=\"" + num(lw) + "\" height=\"" +
         num(lh) + "\" fill=\"#ffffff\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
    for (size_t k = 0; k < named.size(); k++) {
      const ChartSeries& s = chart.series[named[k]];
      const double y = ly + 14 + 16 * (double)k;
      if (s.kind == ChartKind::points)
        o += "<circle cx=\"" + num(lx + 14) + "\" cy=\"" + num(y - 4) + "\" r=\"4\" fill=\"" + colors[named[k]] +
             "\"/>\n";
      else
        o += "<line x1=\"" + num(lx + 5) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(lx + 23) + "\" y2=\"" +
             num(y - 4) + "\" stroke=\"" + colors[named[k]] + "\" stroke-width=\"2\"" +
             (s.kind == ChartKind::fit ? " stroke-dasharray=\"4,3\"" : "") + "/>\n";
      o += "<text x=\"" + num(lx + 28) + "\" y=\"" + num(y) + "\">" + xml_escape(s.name) + "</text>\n";
    }
    o += "</g>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace nanochat
