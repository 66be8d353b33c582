document.querySelectorAll('script[type="application/json"]').forEach(function (node) {
  var fig = JSON.parse(node.textContent);
  var id = node.id.replace(/-data$/, "");
  Plotly.newPlot(id, fig.data, fig.layout,
    {responsive: true, displaylogo: false, showLink: false, showSendToCloud: false,
     toImageButtonOptions: {format: "svg", filename: id}});
});
document.querySelectorAll("details").forEach(function (d) {
  d.addEventListener("toggle", function () {
    d.querySelectorAll(".plot").forEach(function (p) { if (p.data) Plotly.Plots.resize(p); });
  });
});
