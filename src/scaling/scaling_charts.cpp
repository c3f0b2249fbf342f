// The scaling fits as figures, as upstream's notebook plots them: measured points and the
// fitted curves through them (svg_chart), one SVG file per figure.
#include <cmath>
#include <map>

#include "nanochat/common.h"
#include "nanochat/report/svg_chart.h"
#include "nanochat/scaling.h"

namespace nanochat {

namespace {

// measured points and their power law y = 10^k x^s as a curve (no curve when it was not
// fitted); the legend says "y_symbol = 10^k x_symbol^s"
void add_line(Chart& chart, const std::string& points_name, const std::vector<double>& x, const std::vector<double>& y,
              const ScalingLine& line, const std::string& y_symbol, const std::string& x_symbol) {
  chart.series.push_back(chart_points(points_name, x, y));
  if (line.points > 0)
    chart.series.push_back(
        chart_fit(strprintf("%s = 10^%.3f %s^%.3f", y_symbol.c_str(), line.intercept, x_symbol.c_str(), line.slope),
                  [line](double v) { return line.at(v); }));
}

Chart chart_titled(const std::string& title, const std::string& x_label, const std::string& y_label, bool y_log) {
  Chart chart;
  chart.title = title;
  chart.x_label = x_label;
  chart.y_label = y_label;
  chart.x_log = true;  // every figure here spans orders of magnitude of compute or parameters
  chart.y_log = y_log;
  return chart;
}

}  // namespace

std::string scaling_write_charts(const ScalingLaws& laws, const std::string& dir, const std::string& prefix) {
  std::string md;
  auto write = [&](const Chart& chart, const std::string& name) {
    atomic_write_file(dir + "/" + prefix + "-" + name + ".svg", chart_render_svg(chart));
    md += "![" + chart.title + "](" + prefix + "-" + name + ".svg)\n\n";
  };

  std::vector<double> c, n, d, bpb;  // the loss fit's points: the optima, or the runs
  if (!laws.optima.empty()) {
    Chart iso = chart_titled("IsoFLOP curves: val bpb against parameters", "effective parameters N", "val bpb", false);
    std::map<double, std::vector<const ScalingRun*>> by_budget;
    for (const ScalingRun& r : laws.runs) by_budget[r.flops_budget].push_back(&r);
    std::vector<double> opt_n, opt_bpb;
    for (const ScalingOptimum& o : laws.optima) {
      std::vector<double> x, y;
      for (const ScalingRun* r : by_budget[o.flops_budget]) {
        x.push_back((double)r->params);
        y.push_back(r->val_bpb);
      }
      iso.series.push_back(chart_points(strprintf("C = %.3g", o.flops_budget), x, y));
      if (o.a != 0) {  // the parabola in log10 N over this budget's runs and its vertex
        const double a = o.a, b = o.b, cc = o.c;
        double lo = x.front(), hi = x.back();
        if (o.from_parabola) lo = std::min(lo, o.params), hi = std::max(hi, o.params);
        iso.series.push_back(chart_fit(
            "",
            [a, b, cc](double v) {
              const double lx = std::log10(v);
              return a * lx * lx + b * lx + cc;
            },
            lo, hi));
      }
      opt_n.push_back(o.params);
      opt_bpb.push_back(o.val_bpb);
      c.push_back(o.flops_budget);
      n.push_back(o.params);
      d.push_back(o.tokens);
      bpb.push_back(o.val_bpb);
    }
    ChartSeries optima = chart_points("optimum of each budget", opt_n, opt_bpb);
    optima.color = "#000000";
    iso.series.push_back(optima);
    write(iso, "isoflop");

    Chart opt = chart_titled("Compute-optimal parameters N* and tokens D*", "training FLOPs C", "N* or D*", true);
    add_line(opt, "N*", c, n, laws.params_vs_flops, "N*", "C");
    add_line(opt, "D*", c, d, laws.tokens_vs_flops, "D*", "C");
    write(opt, "optimal-n-d");
  } else {
    for (const ScalingRun& r : laws.runs) {
      c.push_back(r.flops);
      n.push_back((double)r.params);
      bpb.push_back(r.val_bpb);
    }
  }
  const std::string over = laws.optima.empty() ? "runs" : "optimum of each budget";
  Chart loss = chart_titled("Val bpb against compute", "training FLOPs C", "val bpb", true);
  add_line(loss, over, c, bpb, laws.loss_vs_flops, "bpb", "C");
  write(loss, "loss-vs-flops");

  Chart loss_n = chart_titled("Val bpb against parameters", "effective parameters N", "val bpb", true);
  add_line(loss_n, over, n, bpb, laws.loss_vs_params, "bpb", "N");
  write(loss_n, "loss-vs-params");
  return md;
}

}  // namespace nanochat
