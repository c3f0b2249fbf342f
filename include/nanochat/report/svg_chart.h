// Line and scatter charts as standalone SVG text (no script, no external font or file): a
// title, axes with "nice" ticks (1-2-5 steps; powers of ten on a log axis), axis labels, a
// legend, and one or more series. The report card draws its training curves with it, and the
// scaling-law fits (measured points plus a fitted curve).
//
// Example (a scaling-law figure):
//   Chart c;
//   c.title = "Loss against compute";
//   c.x_label = "training FLOPs";
//   c.y_label = "val bpb";
//   c.x_log = true;
//   c.series.push_back(chart_points("runs", flops, bpb));
//   c.series.push_back(chart_fit("fit: 3.1 C^-0.05", [](double c) { return 3.1 * std::pow(c, -0.05); }));
//   atomic_write_file(dir + "/loss-vs-flops.svg", chart_render_svg(c));
//
// What the SVG holds, so that a browser (or a test) can count the data: every series is one
//   <g class="series" data-name="NAME" data-kind="line|points|fit" data-n="N">
// where N is the number of points drawn (chart_drawn_count): the finite ones, and on a log
// axis only those > 0; the others are skipped, never drawn at a made-up place.
//   line:   one <polyline class="line"> of N points (plus <circle class="mk"> markers when
//           N <= 60, so that one or a few points stay visible; markers are not counted apart)
//   points: N <circle class="pt">, each with a <title> "x, y" tooltip
//   fit:    one dashed <polyline class="fit"> of N samples of the function over the x range
//           of the data series (geometric spacing on a log x axis); a curve, not data
// The axes span every drawn point (fit samples included), so nothing is clipped.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nanochat {

enum class ChartKind { line, points, fit };

struct ChartSeries {
  std::string name;  // in the legend and in data-name; "" = not in the legend
  ChartKind kind = ChartKind::line;
  std::vector<double> x, y;             // line and points: the data, same length
  std::function<double(double)> f;      // fit: y = f(x)
  double fit_x_min = 0, fit_x_max = 0;  // fit: the x range; both 0 = the data series' x range
  int fit_samples = 100;
  std::string color;  // "" = the next color of the palette (a fit: the color of the
                      // series before it, so a fit pairs with its points)
};

ChartSeries chart_line(const std::string& name, std::vector<double> x, std::vector<double> y);
ChartSeries chart_points(const std::string& name, std::vector<double> x, std::vector<double> y);
// a fitted curve over [x_min, x_max]; x_min == x_max == 0: the x range of the chart's data
ChartSeries chart_fit(const std::string& name, std::function<double(double)> f, double x_min = 0, double x_max = 0,
                      int samples = 100);

struct Chart {
  std::string title, x_label, y_label;
  bool x_log = false, y_log = false;  // log10 axes; values <= 0 are not drawn on them
  int width = 720, height = 420;      // pixels
  std::vector<ChartSeries> series;
};

// the SVG document; a chart with nothing to draw still renders its frame and says "no data"
std::string chart_render_svg(const Chart& chart);
// the points (samples, for a fit) that chart_render_svg draws for chart.series[i]
int64_t chart_drawn_count(const Chart& chart, size_t i);

}  // namespace nanochat
