/* Draws the report's charts with uPlot from the JSON block #report-data; no network, no other files.
   Hover: the legend reads each series' median at the cursor with its seed spread [min–max].
   Click a legend entry to hide or show that series. Whiskers show the seed spread on the plot. */
(function () {
  "use strict";
  var PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
                 "#882255", "#44AA99", "#999933", "#AA4499", "#6699CC"];
  var HEIGHT = 300;
  var plots = [];

  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return "—";
    var a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  function widthOf(el) {
    var w = el.clientWidth || (el.parentNode && el.parentNode.clientWidth) || 800;
    return Math.max(320, Math.min(w, 1100));
  }

  function whiskers(chart) {
    return function (u) {
      var ctx = u.ctx, px = uPlot.pxRatio || window.devicePixelRatio || 1;
      chart.series.forEach(function (s, i) {
        if (!u.series[i + 1].show) return;
        ctx.save();
        ctx.strokeStyle = PALETTE[i % PALETTE.length];
        ctx.lineWidth = 1.5 * px;
        ctx.beginPath();
        for (var j = 0; j < chart.x.length; j++) {
          var lo = s.lo[j], hi = s.hi[j];
          if (lo === null || hi === null || lo === hi) continue;
          var x = u.valToPos(chart.x[j], "x", true);
          var y1 = u.valToPos(lo, "y", true), y2 = u.valToPos(hi, "y", true);
          ctx.moveTo(x, y1); ctx.lineTo(x, y2);
          ctx.moveTo(x - 4 * px, y1); ctx.lineTo(x + 4 * px, y1);
          ctx.moveTo(x - 4 * px, y2); ctx.lineTo(x + 4 * px, y2);
        }
        ctx.stroke();
        ctx.restore();
      });
    };
  }

  function draw(el, chart) {
    var series = [{ label: chart.x_label, value: function (u, v) { return v === null ? "—" : fmt(v); } }];
    chart.series.forEach(function (s, i) {
      series.push({
        label: s.label + (s.status ? " [" + s.status + "]" : ""),
        stroke: PALETTE[i % PALETTE.length],
        width: 2,
        spanGaps: true,
        points: { show: chart.x.length <= 40, size: 6 },
        value: function (u, v, si, idx) {
          if (v === null || v === undefined) return "—";
          var t = fmt(v);
          if (idx !== null && idx !== undefined) {
            var lo = s.lo[idx], hi = s.hi[idx];
            if (lo !== null && hi !== null && fmt(lo) !== fmt(hi)) t += " [" + fmt(lo) + "–" + fmt(hi) + "]";
          }
          return t;
        }
      });
    });
    var xAxis = { label: chart.x_label };
    var xScale = { time: false };
    if (chart.x_log) {
      xScale = { time: false, distr: 3, log: 2 };
      xAxis.splits = function () { return chart.x; };
      xAxis.values = function (u, vals) { return vals.map(function (v) { return String(v); }); };
    } else if (chart.kind.indexOf("hit-rate") === 0 && chart.x.length <= 24) {
      xAxis.splits = function () { return chart.x; };  // turns and positions are whole numbers
    }
    var yRange = chart.kind.indexOf("hit-rate") === 0 ? { range: [0, 100] } : {};
    var opts = {
      width: widthOf(el),
      height: HEIGHT,
      scales: { x: xScale, y: yRange },
      axes: [xAxis, { label: chart.y_label, size: 60 }],
      series: series,
      hooks: { draw: [whiskers(chart)] }
    };
    var data = [chart.x].concat(chart.series.map(function (s) { return s.y; }));
    var u = new uPlot(opts, data, el);
    el.setAttribute("data-series", String(chart.series.length));
    plots.push({ u: u, el: el });
  }

  function resizeAll(width) {
    plots.forEach(function (p) { p.u.setSize({ width: width || widthOf(p.el), height: HEIGHT }); });
  }

  function main() {
    var block = document.getElementById("report-data");
    var charts = block ? JSON.parse(block.textContent).charts : [];
    var drawn = 0;
    charts.forEach(function (c) {
      var el = document.getElementById(c.id);
      if (!el) return;
      try {
        draw(el, c);
        drawn += 1;
      } catch (e) {
        el.textContent = "chart not drawn: " + e;
        el.setAttribute("data-chart-error", String(e));
      }
    });
    document.documentElement.setAttribute("data-charts-drawn", String(drawn));
    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { resizeAll(); }, 100);
    });
    window.addEventListener("beforeprint", function () {
      document.querySelectorAll("details").forEach(function (d) { d.open = true; });
      resizeAll(680);
    });
    window.addEventListener("afterprint", function () { resizeAll(); });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
  else main();
})();
