// Draws each alert's window (figure.chart, data-chart = {ts, values, band, fired_at, unit}) with uPlot.
(function () {
  document.querySelectorAll("figure.chart").forEach(function (fig) {
    var c = JSON.parse(fig.dataset.chart);
    var data = [c.ts, c.values];
    var series = [{}, {label: c.unit, stroke: "#1f6feb", width: 2, spanGaps: true}];
    var bands = [];
    if (c.band) {
      data.push(c.ts.map(function () { return c.band[1]; }), c.ts.map(function () { return c.band[0]; }));
      series.push({label: "band high", stroke: "#8b949e", dash: [4, 4]}, {label: "band low", stroke: "#8b949e", dash: [4, 4]});
      bands.push({series: [2, 3], fill: "rgba(139,148,158,0.15)"});
    }
    var fired = {
      hooks: {draw: [function (u) {
        var x = u.valToPos(c.fired_at, "x", true), ctx = u.ctx;
        ctx.save(); ctx.strokeStyle = "#c0392b"; ctx.lineWidth = 2; ctx.beginPath();
        ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke(); ctx.restore();
      }]}
    };
    var width = Math.min(fig.parentElement.clientWidth - 24, 900);
    var plot = new uPlot({width: width, height: 220, series: series, bands: bands, plugins: [fired],
                          axes: [{}, {label: c.unit}]}, data, fig);
    fig.dataset.drawn = String(plot.series.length);
  });
})();
